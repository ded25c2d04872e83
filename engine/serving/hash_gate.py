"""A bound on the password hashes a process computes at once (docs/security.md: "Password
checks are bounded").

An argon2 check with argon2-cffi's defaults holds 64 MiB and a core for a sixth of a second.
Logins are counted against their limits before their password is checked, but within those
limits (five an address, any number of names) 80 logins at once had 40 checks running in the
portal's thread pool: 2.5 GiB more for the daemon, and every core busy, delivery's too. So
every password check and hash of a process (portal logins, inbound ``basic`` callers, new
passwords) takes a slot of one :class:`HashGate`: :func:`default_slots` at once (half the
cores, at least one, at most four: 256 MiB at most), up to :data:`HASH_QUEUE` more wait at
most :data:`HASH_WAIT` seconds for one, and the others are refused at once
(:class:`HashGateBusy`; the login is answered 429 with ``Retry-After``), so that a flood of
logins ties up a few threads for a few seconds, never the process's memory.
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

MAX_SLOTS = 4  # hashes at once at most, whatever the cores (64 MiB each with the defaults)
HASH_QUEUE = 8  # checks waiting for a slot at most; more are refused at once
HASH_WAIT = 2.0  # seconds a check waits for a slot before it is refused


def default_slots() -> int:
    """Hashes at once for this machine: half its cores, at least 1, at most :data:`MAX_SLOTS`
    (one core at least stays for delivery)."""
    return max(1, min(MAX_SLOTS, (os.cpu_count() or 1) // 2))


class HashGateBusy(EncoreError):
    """Every slot is taken and the queue is full, or the wait ran out: try again in
    ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many password checks at once; try again in "
                         f"{retry_after:.0f} s")
        self.retry_after = retry_after


class HashGate:
    """``slots`` hashes at once; ``queue`` more wait up to ``wait`` seconds (0: none wait).
    Thread-safe: the checks run on the servers' worker threads."""

    def __init__(self, slots: int | None = None, *, queue: int = HASH_QUEUE,
                 wait: float = HASH_WAIT) -> None:
        self.slots = default_slots() if slots is None else slots
        if self.slots < 1:
            raise ValueError(f"a hash gate needs at least 1 slot, not {self.slots}")
        self.queue, self.wait = queue, wait
        self.waiting = 0  # checks waiting for a slot now
        self.refused = 0  # checks refused since the start
        self._free = threading.BoundedSemaphore(self.slots)
        self._lock = threading.Lock()

    def check(self) -> None:
        """:class:`HashGateBusy` now if a check would find neither a slot nor a place in the
        queue (so that a login refused for it costs no write of its attempt)."""
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
    """The process's gate, shared by its portals and inbound services (made on first use)."""
    global _process_gate
    with _gate_lock:
        if _process_gate is None:
            _process_gate = HashGate()
        return _process_gate
