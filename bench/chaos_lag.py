"""The machine's own stalls, as the fault campaign sees them: a thread that sleeps
:data:`TICK` seconds again and again and notes when it woke up late by more than
:data:`LATE` — the whole machine starved (a load average of 20 on 2 cores, a host pausing
the VM), which may starve a daemon's heartbeat past the lease as surely as a SIGSTOP.
Each such stall is a fault window touching every daemon (bench/chaos_checker.py
``claim_stolen``), counted in the campaign's table so that it is never hidden.
"""
from __future__ import annotations

import threading
import time

__all__ = ["LATE", "LagWatch"]

TICK = 0.05  # seconds the watch sleeps each time
LATE = 0.5  # seconds late a wake-up must be to count as a stall of the machine


class LagWatch:
    """Started with the campaign; :attr:`stalls` are (start, end) epoch seconds."""

    def __init__(self) -> None:
        self.stalls: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="chaos-lag")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            self._stop.wait(TICK)
            late = time.monotonic() - before - TICK
            if late > LATE:
                now = time.time()
                self.stalls.append((now - late - TICK, now))

    @property
    def longest(self) -> float:
        return max((end - start for start, end in self.stalls), default=0.0)
