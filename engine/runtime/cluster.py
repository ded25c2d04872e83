"""Several daemons on one database: who leads, who runs a FIFO item, and whose clock counts.

:class:`LeaseKeeper` holds one daemon's leases and :class:`DatabaseClock` carries the database's
time on the monotonic clock (docs/architecture.md, docs/scale-out.md). A lease counts as held
locally only until shortly before it could expire, so a daemon cut off from the database stops using
it before anyone else may take it.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from engine.clock import Clock, SystemClock
from engine.config.production import ItemConfig
from engine.delivery.claims import LEASE_MARGIN
from engine.errors import StoreError
from engine.runtime.lifecycle import LifecycleLog, LifeStep, leases_text
from engine.runtime.liveness import boot_id, pid_namespace, why_dead
from engine.store.sql import SqlStore

__all__ = ["LEADER", "STEP_SECONDS", "DatabaseClock", "LeaseKeeper", "boot_id",
           "forget_silent_daemons", "is_fifo", "item_lease_name", "pid_namespace",
           "reap_dead_local_daemons"]

log = logging.getLogger(__name__)

LEADER = "leader"
CLOCK_TOLERANCE = 0.005  # seconds of measured offset change ignored as jitter
STEP_SECONDS = 1.0  # a larger jump of the database's clock is a step, not drift


def item_lease_name(item: str) -> str:
    """The lease that makes one daemon at a time work FIFO item ``item``."""
    return f"item:{item}"


def is_fifo(item: ItemConfig) -> bool:
    """True for an item delivered one at a time, in order, across every daemon."""
    operation = item.operation_settings
    return item.pool_size == 1 and (operation is None or operation.retry_mode == "blocking")


class DatabaseClock:
    """The database's time, kept on this process's monotonic clock (docs/architecture.md, "Which
    clock decides what"). :meth:`sync` re-anchors it; monotonic time and sleeps are ``base``'s."""

    def __init__(self, store: SqlStore, base: Clock | None = None) -> None:
        self.store = store
        self.base: Clock = base or SystemClock()
        self._lock = threading.RLock()
        self._anchor = (self.base.now(), self.base.monotonic())
        self._synced = False

    @property
    def offset(self) -> float:
        """Seconds this clock is ahead of this host's wall clock now."""
        return (self.now() - self.base.now()).total_seconds()

    def sync(self, reading: tuple[datetime, float] | None = None) -> float:
        """Read the database's clock and anchor this clock on it; return the step (when above
        ``STEP_SECONDS``) or 0.0. Raises StoreError. ``reading``: on SQLite, the wall and monotonic
        times the caller already read.

        The anchor moves only when it falls outside the reading's round-trip bounds, and then to the
        nearer bound: a delayed reading must not put this clock ahead, which would expire other
        daemons' leases early.
        """
        if reading is not None and not self.store.is_postgres:
            now, started = reading
            ended = started
        else:
            started = self.base.monotonic()
            now = self.store.db_now() if self.store.is_postgres else self.base.now()
            ended = self.base.monotonic()
        with self._lock:
            anchored, at = self._anchor
            first, self._synced = not self._synced, True
            if first:
                self._anchor = (now, (started + ended) / 2)
                moved = (now - (anchored + timedelta(seconds=(started + ended) / 2 - at))
                         ).total_seconds()
            else:
                early = anchored + timedelta(seconds=started - at)
                late = anchored + timedelta(seconds=ended - at)
                if now > late:
                    moved = (now - late).total_seconds()  # the database is ahead
                elif now < early:
                    moved = (now - early).total_seconds()  # ... or behind
                else:
                    moved = 0.0
                if abs(moved) <= CLOCK_TOLERANCE:
                    return 0.0
                self._anchor = (anchored + timedelta(seconds=moved), at)
        if first:
            if abs(moved) > STEP_SECONDS:
                log.info("this host's clock is %+.3f s off the database server's; "
                         "using the server's", -moved)
            return 0.0
        if abs(moved) <= STEP_SECONDS:
            return 0.0
        log.warning("the %s clock stepped by %+.3f s against this process's monotonic clock",
                    "database server's" if self.store.is_postgres else "wall", moved)
        return moved

    def holding(self) -> threading.RLock:
        """The lock :meth:`now` takes; while held no thread reads this clock (the daemon holds it
        across a clock step). Never taken inside a transaction."""
        return self._lock

    def monotonic(self) -> float:
        return self.base.monotonic()

    def now(self) -> datetime:
        with self._lock:
            anchored, at = self._anchor
        return anchored + timedelta(seconds=self.base.monotonic() - at)

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        return self.base.sleep(seconds, stop)


class LeaseKeeper:
    """The leases one daemon (``owner``) wants, and which of them it holds."""

    def __init__(self, store: SqlStore, owner: str, *, clock: Clock, lease_seconds: float,
                 retry_seconds: float,
                 on_change: Callable[[str, bool], None] | None = None) -> None:
        """``on_change(name, took)``: called when this daemon takes or loses a lease."""
        self.store = store
        self.on_change = on_change
        self.owner = owner
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.retry_seconds = retry_seconds
        self._wanted: set[str] = set()
        self._valid_until: dict[str, float] = {}
        self._next_try: dict[str, float] = {}
        self._lock = threading.Lock()

    def want(self, name: str) -> None:
        """Take lease ``name`` whenever it is free, from the next renewal on."""
        with self._lock:
            self._wanted.add(name)

    def holds(self, name: str) -> bool:
        """True while this daemon holds ``name`` (no database round trip)."""
        with self._lock:
            return self.clock.monotonic() < self._valid_until.get(name, float("-inf"))

    def held(self) -> list[str]:
        """Names of the leases held now."""
        with self._lock:
            names = list(self._valid_until)
        return sorted(n for n in names if self.holds(n))

    def hold(self, name: str) -> bool:
        """True if ``name`` is held; if not, try to take it (at most every ``retry_seconds``)."""
        if self.holds(name):
            return True
        with self._lock:
            if self.clock.monotonic() < self._next_try.get(name, float("-inf")):
                return False
            self._next_try[name] = self.clock.monotonic() + self.retry_seconds
        return self._acquire(name)

    def renew(self) -> list[str]:
        """Renew every lease held and try to take every one wanted; return those held."""
        with self._lock:
            names = sorted(self._wanted)
        for name in names:
            self._acquire(name)
        return self.held()

    def release(self, name: str) -> None:
        """Stop wanting ``name`` and give it up if held."""
        with self._lock:
            self._wanted.discard(name)
            self._valid_until.pop(name, None)
        try:
            self.store.leases.release(name, self.owner)
        except StoreError as exc:
            log.warning("could not give up lease %s (it will expire): %s", name, exc)

    def release_all(self) -> list[str]:
        """Give up every lease (the daemon stops); return the names it held."""
        with self._lock:
            self._wanted.clear()
            self._valid_until.clear()
        return self.store.leases.release_all(self.owner)

    def _acquire(self, name: str) -> bool:
        started = self.clock.monotonic()
        try:
            ok = self.store.leases.acquire(name, self.owner, now=self.clock.now(),
                                           lease_seconds=self.lease_seconds)
        except StoreError as exc:
            log.warning("could not renew lease %s: %s", name, exc)
            return self.holds(name)
        with self._lock:
            dropped = ok and name not in self._wanted
            ok = ok and not dropped
            had = self.clock.monotonic() < self._valid_until.get(name, float("-inf"))
            if ok:
                margin = self.lease_seconds * LEASE_MARGIN
                self._valid_until[name] = started + self.lease_seconds - margin
            else:
                self._valid_until.pop(name, None)
        if dropped:
            self.store.leases.release(name, self.owner)
        if ok != had and self.on_change is not None:
            self.on_change(name, ok)
        elif ok and not had:
            log.info("daemon %s took lease %s", self.owner, name)
        elif had and not ok:
            log.warning("daemon %s lost lease %s to another daemon", self.owner, name)
        return ok


def reap_dead_local_daemons(store: SqlStore, host: str, namespace: str | None,
                            lifecycle: LifecycleLog | None = None) -> int:
    """Forget dead daemons of ``host`` in this PID ``namespace``; returns how many."""
    if namespace is None:
        return 0
    forgotten = 0
    for daemon_id, pid, started in store.local_daemons(host, namespace=namespace):
        why = why_dead(pid, started)
        if why is not None:
            forgotten += forget_daemon(store, daemon_id, f"died ({why})", lifecycle)
    return forgotten


def forget_silent_daemons(store: SqlStore, *, silent_seconds: float, now: datetime,
                          lifecycle: LifecycleLog | None = None) -> None:
    """Forget daemons whose last heartbeat is more than ``silent_seconds`` before ``now``."""
    for daemon_id in store.stale_daemons(now - timedelta(seconds=silent_seconds)):
        forget_daemon(store, daemon_id, f"silent for over {silent_seconds:g} s", lifecycle)


def forget_daemon(store: SqlStore, daemon_id: str, why: str,
                  lifecycle: LifecycleLog | None = None) -> bool:
    """Forget ``daemon_id`` and release its claims and leases; False if already done."""
    if not store.unregister_daemon(daemon_id):
        return False
    released = store.release_claims(daemon_id)
    leases = store.leases.release_all(daemon_id)
    text = (f"daemon {daemon_id} {why}; {released} message(s) it held are back in their "
            f"queues{leases_text(leases)}")
    if lifecycle is None:
        log.warning("%s", text)
    else:
        lifecycle.write("Warning", LifeStep.RECOVER, text)
    return True
