"""What a durable commit costs with a synchronous standby (RELIABILITY.md's figures).

    python bench/chaos_costs.py [--n 300]

Starts the campaign's primary and synchronous standby (tests/integration/pg_cluster.py; the
cluster runs with ``fsync = off``, so the figures are the round trip to the standby, not a
disk's flush) and times one committed single-row UPDATE per transaction with
``synchronous_commit`` ``on`` (waits until the standby has flushed the commit record: what
Encore's durable commits do), ``local`` (the primary only) and ``off``; prints ms per
commit with the load average.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.chaos_pg import ClusterPg  # noqa: E402

MODES = ("on", "local", "off")


def time_commits(conninfo: str, mode: str, n: int) -> float:
    """Milliseconds per autocommitted single-row UPDATE with ``synchronous_commit = mode``."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"SET synchronous_commit = {mode}")
        conn.execute("UPDATE chaos_cost SET n = n + 1 WHERE id = 1")  # warm
        started = time.perf_counter()
        for _ in range(n):
            conn.execute("UPDATE chaos_cost SET n = n + 1 WHERE id = 1")
        return (time.perf_counter() - started) * 1000 / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300, help="commits per mode (300)")
    args = parser.parse_args(argv)
    pg = ClusterPg()
    try:
        conninfo = f"host=127.0.0.1 port={pg.primary.port} user=postgres dbname=encore"
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("CREATE TABLE chaos_cost (id int PRIMARY KEY, n int)")
            conn.execute("INSERT INTO chaos_cost VALUES (1, 0)")
        figures = {}
        for _ in range(2):  # alternated twice: the machine is shared
            for mode in MODES:
                figures.setdefault(mode, []).append(time_commits(conninfo, mode, args.n))
    finally:
        pg.close()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"one committed single-row UPDATE, {args.n} per run, best of 2 (load average {load})")
    for mode in MODES:
        print(f"  synchronous_commit = {mode:5s}  {min(figures[mode]):.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
