"""The hot-path cost of the console's per-minute counters (docs/portal.md): CPU per message
of what a worker adds for them — one ``attempt`` and one ``completed`` on
:class:`engine.store.rollup.RollupCounter` — next to a no-op message's whole cost in the
drain bench (about 0.1 ms). Prints the figure with the load average.

    python bench/rollup_cost.py [N]
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.clock import SystemClock
from engine.store.rollup import RollupCounter


def per_message_us(count: int) -> float:
    counter = RollupCounter(SystemClock())
    started = time.process_time()
    for _ in range(count):
        counter.attempt("Payments", "ok", 0.0021, 1)
        counter.completed("Payments")
    return (time.process_time() - started) / count * 1e6


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    load = os.getloadavg()
    best = min(per_message_us(count) for _ in range(3))
    print(f"rollup counters: {best:.2f} µs CPU per message (attempt + completed), best of 3 "
          f"runs of {count:,}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
