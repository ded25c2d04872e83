"""A bound on the password hashes a process computes at once (docs/security.md: "Password
checks are bounded"): each argon2 check holds 64 MiB and a core, so every check of the
process takes a slot of one :class:`HashGate`, and a flood is refused, not queued.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

from engine.errors import EncoreError

__all__ = ["HashGate", "HashGateBusy", "default_slots", "process_gate"]

log = logging.getLogger(__name__)

MAX_SLOTS = 4
HASH_QUEUE = 8
HASH_WAIT = 2.0


def default_slots() -> int:
    """Hashes at once: half the cores, 1 to :data:`MAX_SLOTS`."""
    return max(1, min(MAX_SLOTS, (os.cpu_count() or 1) // 2))


class HashGateBusy(EncoreError):
    """No slot to be had: try again in ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many password checks at once; try again in "
                         f"{retry_after:.0f} s")
        self.retry_after = retry_after


class HashGate:
    """``slots`` hashes at once; ``queue`` more wait up to ``wait`` seconds. Thread-safe."""

    def __init__(self, slots: int | None = None, *, queue: int = HASH_QUEUE,
                 wait: float = HASH_WAIT) -> None:
        self.slots = default_slots() if slots is None else slots
        if self.slots < 1:
            raise ValueError(f"a hash gate needs at least 1 slot, not {self.slots}")
        self.queue, self.wait = queue, wait
        self.waiting = 0
        self.refused = 0
        self._free = threading.BoundedSemaphore(self.slots)
        self._lock = threading.Lock()

    def check(self) -> None:
        """HashGateBusy now if a check would find neither a slot nor a place in the queue."""
        with self._lock:
            full = self.waiting >= self.queue and not self._has_free()
        if full:
            self._refuse()

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold a slot for the ``with`` block; :class:`HashGateBusy` if none is to be had."""
        if not self._free.acquire(blocking=False):
            self._queue_for_slot()
        try:
            yield
        finally:
            self._free.release()

    def _queue_for_slot(self) -> None:
        with self._lock:
            queued = self.waiting < self.queue
            if queued:
                self.waiting += 1
        got = False
        if queued:
            try:
                got = self._free.acquire(timeout=self.wait)
            finally:
                with self._lock:
                    self.waiting -= 1
        if not got:
            self._refuse()

    def _has_free(self) -> bool:
        if self._free.acquire(blocking=False):
            self._free.release()
            return True
        return False

    def _refuse(self) -> None:
        with self._lock:
            self.refused += 1
        log.warning("refused a password check: %d at once and %d waiting already",
                    self.slots, self.queue)
        raise HashGateBusy(max(self.wait, 1.0))


_process_gate: HashGate | None = None
_gate_lock = threading.Lock()


def process_gate() -> HashGate:
    """The process's gate, shared by its portals and inbound services."""
    global _process_gate
    with _gate_lock:
        if _process_gate is None:
            _process_gate = HashGate()
        return _process_gate
