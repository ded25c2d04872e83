"""The group commit's own cost: ``python bench/group_commit.py [--threads N] [--writes N]``.

``N`` threads each submit their writes to one :class:`engine.store.group.GroupCommit` whose
commit sleeps ``--commit-ms`` (a disk flush, which leaves the interpreter to the others) and
does nothing else, so what is measured is the hand-off between the callers: writes per
second, the process's CPU per write, and writes per commit. Printed with the load average.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.store.group import GroupCommit


def measure(threads: int, writes: int, commit_s: float) -> None:
    def one(write: int) -> int:
        time.sleep(commit_s)
        return write

    def many(batch: Sequence[int]) -> list[int]:
        time.sleep(commit_s)
        return list(batch)

    group: GroupCommit[int, int] = GroupCommit(one, many)

    def submit_all() -> None:
        for n in range(writes):
            group.submit(n)

    workers = [threading.Thread(target=submit_all) for _ in range(threads)]
    cpu, wall = time.process_time(), time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    total = threads * writes
    print(f"{total / wall:,.0f} writes/s, {cpu / total * 1e6:.1f} µs of CPU per write, "
          f"{group.writes / group.commits:.1f} writes per commit ({threads} threads, "
          f"{commit_s * 1000:g} ms commits); load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--writes", type=int, default=2000, help="writes per thread")
    parser.add_argument("--commit-ms", type=float, default=0.3)
    args = parser.parse_args()
    measure(args.threads, args.writes, args.commit_ms / 1000)


if __name__ == "__main__":
    main()
