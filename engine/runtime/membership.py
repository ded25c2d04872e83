"""A daemon's place among the daemons of its database: it registers, beats its heartbeat (which
renews its claims and leases and keeps its clock in step with the database's), reaps dead daemons
of its host and forgets long-silent ones, and leaves. docs/scale-out.md.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta

from engine.clock import Clock
from engine.config.production import ItemConfig, ProductionConfig
from engine.delivery.item import ItemRunner
from engine.errors import EncoreError
from engine.runtime.cluster import (
    LEADER,
    STEP_SECONDS,
    DatabaseClock,
    LeaseKeeper,
    boot_id,
    forget_silent_daemons,
    is_fifo,
    item_lease_name,
    reap_dead_local_daemons,
)
from engine.runtime.lifecycle import LifecycleLog
from engine.runtime.liveness import process_start
from engine.runtime.steps import TICK_RETRY_DELAY, guarded
from engine.store.clockstep import frame_settled, settle_clock_frame
from engine.store.filewatch import DatabaseFileWatch
from engine.store.sql import SqlStore

log = logging.getLogger("engine.runtime.daemon")

FORGET_AFTER_LEASES = 10  # a daemon silent for this many lease_seconds is taken off the list


class Membership:
    """The registration, heartbeat and leases of daemon ``daemon_id`` of ``host``.

    ``production()``: the production running now (a reload replaces it); ``runners``: the items
    whose claims the heartbeat renews; ``stop()``: asks the daemon to stop (its database file is
    gone).
    """

    def __init__(self, store: SqlStore, clock: Clock, *, daemon_id: str, host: str,
                 pid_namespace: str | None, production: Callable[[], ProductionConfig],
                 runners: Mapping[str, ItemRunner], lifecycle: LifecycleLog,
                 file_watch: DatabaseFileWatch, stop: Callable[[], None]) -> None:
        self.store = store
        self.clock = clock
        self.id = daemon_id
        self.host = host
        self.pid_namespace = pid_namespace
        self.production = production
        self.runners = runners
        self.lifecycle = lifecycle
        self.file_watch = file_watch
        self.stop = stop
        config = production()
        self.leases = LeaseKeeper(store, daemon_id, clock=clock,
                                  lease_seconds=config.lease_seconds,
                                  retry_seconds=config.poll_interval,
                                  on_change=self._lease_changed)
        self._next_beat = 0.0
        self._beat_lock = threading.Lock()

    @property
    def interval(self) -> float:
        """Seconds between heartbeats: a third of ``lease_seconds``."""
        return self.production().lease_seconds / 3

    def join(self, items: Iterable[ItemConfig]) -> None:
        """Reap dead daemons of this host, register, and take the leader's and FIFO ``items``'
        leases that are free; the next heartbeat is due one interval from now."""
        self.reap_dead_local_daemons()
        items = list(items)
        self.store.register_daemon(self.id, host=self.host, pid=os.getpid(),
                                   pid_namespace=self.pid_namespace,
                                   process_start=process_start(),
                                   production=self.production().name,
                                   items=",".join(i.name for i in items), now=self.clock.now())
        self.leases.want(LEADER)
        for item in items:
            if is_fifo(item):
                self.leases.want(item_lease_name(item.name))
        self.leases.renew()
        self._next_beat = self.clock.monotonic() + self.interval

    def leave(self, *, clean: bool) -> None:
        """Release the leases (after the claims, if not ``clean``) and unregister."""
        try:
            if not clean:
                self.store.release_claims(self.id)
            self.leases.release_all()  # after the claims: a FIFO head is back in its queue
            self.store.unregister_daemon(self.id)
        except EncoreError as exc:
            log.error("could not unregister daemon (its leases will expire): %s", exc)

    def beat_if_due(self, now: float) -> float:
        """The heartbeat if it is due at monotonic ``now``; the seconds until the next one."""
        with self._beat_lock:
            if now >= self._next_beat:
                try:
                    self.heartbeat()
                    self._next_beat = now + self.interval
                except Exception as exc:
                    log.error("heartbeat failed; trying again in %.0f s: %s",
                              TICK_RETRY_DELAY, exc)
                    self._next_beat = now + min(TICK_RETRY_DELAY, self.interval)
            return self._next_beat - now

    def heartbeat(self) -> None:
        """Mark this daemon alive, renew claims and leases, reap dead local daemons."""
        if not self.file_watch.check(self._file_lost, self.stop):
            return
        self.sync_clock()
        lease_seconds = self.production().lease_seconds
        started, runners = self.clock.monotonic(), list(self.runners.values())
        claims = [c for runner in runners for c in runner.claims.held()]
        self.store.heartbeat(self.id, now=self.clock.now(), lease_seconds=lease_seconds,
                             claims=claims)
        for runner in runners:
            runner.claims.renewed(started)
        self.leases.renew()
        guarded(self.reap_dead_local_daemons, "the scan for dead daemons")

    def reap_dead_local_daemons(self) -> None:
        """Release the claims and leases of dead daemons of this host now."""
        reap_dead_local_daemons(self.store, self.host, self.pid_namespace, self.lifecycle)

    def forget_dead_daemons(self) -> None:
        """Take daemons silent for ``FORGET_AFTER_LEASES`` lease periods off the list."""
        silent = FORGET_AFTER_LEASES * self.production().lease_seconds
        forget_silent_daemons(self.store, silent_seconds=silent, now=self.clock.now(),
                              lifecycle=self.lifecycle)

    def sync_clock(self) -> None:
        """Re-read the database's clock; on SQLite, first carry stored times across a step of the
        wall clock (:func:`~engine.store.clockstep.settle_clock_frame`)."""
        if not isinstance(self.clock, DatabaseClock):
            return
        boot = boot_id()
        if self.store.is_postgres or boot is None:
            self.clock.sync()
            return
        base = self.clock.base
        reading = (base.now(), base.monotonic())
        if frame_settled(self.store, boot=boot, tolerance=STEP_SECONDS,
                         zero_at=reading[0] - timedelta(seconds=reading[1])):
            self.clock.sync(reading)
            return
        # No thread reads the time until stored times and this clock are both across the step: a
        # retry parked in between would be a whole step off.
        with self.clock.holding():
            reading = (base.now(), base.monotonic())
            step, moved = settle_clock_frame(
                self.store, boot=boot, zero_at=reading[0] - timedelta(seconds=reading[1]),
                tolerance=STEP_SECONDS, lease_seconds=self.production().lease_seconds)
            self.clock.sync(reading)
        if step:
            what = ", ".join(f"{n} {kind}" for kind, n in moved.items() if n) or "nothing"
            self.lifecycle.events.write(
                "Warning", f"the wall clock stepped by {step:+.1f} s; daemon {self.id} moved "
                f"the stored due times and leases with it, so that each keeps the time it had "
                f"left ({what})", source_class="Daemon", source_method="clock")

    def _file_lost(self, text: str) -> None:
        self.store.events.write("Error", text, source_class="Daemon",
                                source_method="heartbeat", now=self.clock.now())

    def _lease_changed(self, name: str, took: bool) -> None:
        self.lifecycle.lease(name, took, record=name == LEADER)
