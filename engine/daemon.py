"""The daemon: runs a production until told to stop.

``tick()`` does the housekeeping that is due (heartbeat, lease renewal) and returns the
seconds until it is due again; ``run()`` waits on an event with that timeout. Signal handlers
only set events. Shutdown stops intake first, then waits for the workers with one overall
timeout (``shutdown_timeout``).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from engine.clock import Clock, SystemClock
from engine.host import BusinessOperation
from engine.item import ItemRunner
from engine.production import ProductionConfig
from engine.store.sql import SqlStore

log = logging.getLogger(__name__)


class Daemon:
    """One running production."""

    def __init__(self, production: ProductionConfig, *, store: SqlStore | None = None,
                 clock: Clock | None = None, env: Mapping[str, str] | None = None) -> None:
        self.production = production
        self.store = store or SqlStore(production.database)
        self.clock = clock or SystemClock()
        self.env = os.environ if env is None else env
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.stop_requested = threading.Event()
        self.runners: dict[str, ItemRunner] = {}

    @property
    def heartbeat_interval(self) -> float:
        return self.production.lease_seconds / 3

    def start(self) -> None:
        """Check the schema, register this daemon and start every operation item."""
        self.store.check_schema()
        operations = [i for i in self.production.items if issubclass(i.cls, BusinessOperation)]
        self.store.register_daemon(self.id, host=socket.gethostname(), pid=os.getpid(),
                                   production=self.production.name,
                                   items=",".join(i.name for i in operations),
                                   now=self.clock.now())
        for item in operations:
            runner = ItemRunner(item, store=self.store, clock=self.clock, owner=self.id,
                                lease_seconds=self.production.lease_seconds,
                                poll_interval=self.production.poll_interval, env=self.env)
            self.runners[item.name] = runner
            runner.start()
        log.info("production %s started: %d item(s), daemon %s", self.production.name,
                 len(self.runners), self.id)

    def tick(self) -> float:
        """Heartbeat and lease renewal; returns seconds until the next tick."""
        try:
            self.store.heartbeat(self.id, now=self.clock.now(),
                                 lease_seconds=self.production.lease_seconds)
        except Exception as exc:  # noqa: BLE001 - a failing database never kills the loop
            log.error("heartbeat failed: %s", exc)
        return self.heartbeat_interval

    def stop(self) -> bool:
        """Stop intake, wait for in-flight attempts (one overall timeout), unregister.
        Returns True when every worker stopped in time."""
        for runner in self.runners.values():
            runner.request_stop()
        deadline = self.clock.monotonic() + self.production.shutdown_timeout
        clean = all([runner.join(max(deadline - self.clock.monotonic(), 0.0))
                     for runner in self.runners.values()])
        try:
            self.store.unregister_daemon(self.id)
        except Exception as exc:  # noqa: BLE001
            log.error("could not unregister daemon: %s", exc)
        log.info("production %s stopped%s", self.production.name,
                 "" if clean else " (some attempts were cut short)")
        return clean

    def run(self) -> None:
        """Run until SIGTERM or SIGINT (or :attr:`stop_requested` is set)."""
        self._install_signal_handlers()
        self.start()
        try:
            while not self.stop_requested.wait(self.tick()):
                pass
        finally:
            self.stop()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def request_stop(signum: int, _frame: Any) -> None:
            log.info("received %s: stopping", signal.Signals(signum).name)
            self.stop_requested.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
