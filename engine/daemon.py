"""The daemon: runs a production until told to stop.

Operation items run on their own worker threads (:class:`~engine.item.ItemRunner`); business
services and the housekeeping — heartbeat and lease renewal, queue alerts, purge for
``retention_days`` — run on one :class:`~engine.scheduler.ProductionScheduler`. ``run()``
only waits for signals; the handlers only set events. Shutdown stops intake first, then waits for the workers with
one overall timeout (``shutdown_timeout``); messages still in hand go back to their queue,
and their open attempts count as outcome unknown on the next start. SIGHUP reloads the
production file: changed items restart, the others keep running.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from datetime import timedelta
from collections.abc import Mapping
from typing import Any

from engine.alerts import AlertingEventLog, ThresholdAlarm
from engine.clock import Clock, SystemClock
from engine.errors import EncoreError
from engine.host import BusinessOperation
from engine.item import ItemRunner
from engine.production import ItemConfig, ProductionConfig, load_production
from engine.metrics import Metrics, MetricsServer
from engine.scheduler import ProductionScheduler
from engine.store import queries
from engine.store.operator import purge
from engine.store.sql import SqlStore

log = logging.getLogger(__name__)

QUEUE_ALERT_INTERVAL = 1.0  # seconds between queue-alert checks
PURGE_INTERVAL = 3600.0  # seconds between purges for retention_days
SIGNAL_POLL = 1.0  # seconds the main loop sleeps between looks at its flags


class Daemon:
    """One running production."""

    def __init__(self, production: ProductionConfig, *, store: SqlStore | None = None,
                 clock: Clock | None = None, env: Mapping[str, str] | None = None) -> None:
        self.production = production
        self.store = store or SqlStore(production.database)
        self.clock = clock or SystemClock()
        self.env = os.environ if env is None else env
        self.host = socket.gethostname()
        self.id = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.wake = threading.Event()
        self.stop_requested = threading.Event()
        self.reload_requested = threading.Event()
        self.runners: dict[str, ItemRunner] = {}
        self.events = AlertingEventLog(self.store.events, self.store, production)
        self._alarms: dict[tuple[str, str], ThresholdAlarm] = {}
        self.metrics = Metrics()
        self.scheduler = ProductionScheduler(production, store=self.store, clock=self.clock,
                                             events=self.events)
        self.metrics_server: MetricsServer | None = None

    @property
    def heartbeat_interval(self) -> float:
        return self.production.lease_seconds / 3

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Check the schema, reclaim the work of dead daemons of this host, register, and
        start every operation item."""
        self.store.check_schema()
        self._reap_dead_local_daemons()
        self.store.register_daemon(self.id, host=self.host, pid=os.getpid(),
                                   production=self.production.name,
                                   items=",".join(i.name for i in self._operations()),
                                   now=self.clock.now())
        for item in self._operations():
            self._start_item(item)
        self._start_scheduler()
        self._start_metrics()
        log.info("production %s started: %d item(s), daemon %s", self.production.name,
                 len(self.runners), self.id)

    def _start_scheduler(self) -> None:
        self.scheduler.add_housekeeping("heartbeat", self.heartbeat_interval, self.heartbeat)
        self.scheduler.add_housekeeping("queue_alerts", QUEUE_ALERT_INTERVAL,
                                        self.check_queue_alerts)
        if self.production.retention_days > 0:
            self.scheduler.add_housekeeping("purge", PURGE_INTERVAL, self.purge)
        self.scheduler.start()

    def _start_metrics(self) -> None:
        if not self.production.metrics_port:
            return
        self.metrics.set_queue_depth_source(self._queue_depths)
        self.metrics_server = MetricsServer(self.metrics, host=self.production.metrics_host,
                                            port=self.production.metrics_port, health=self.health)
        self.metrics_server.start()
        log.info("metrics and /healthz on %s", self.metrics_server.url)

    def _queue_depths(self) -> dict[str, int]:
        stats = queries.queue_stats(self.store)
        return {i.name: stats.get(i.name, {}).get("queued", 0) for i in self._operations()}

    def health(self) -> tuple[bool, str]:
        """(healthy, reason): the database answers and every worker thread is alive."""
        try:
            queries.daemons(self.store)
        except EncoreError as exc:
            return False, f"database unavailable: {exc}"
        dead = [t.name for r in self.runners.values() for t in r.threads if not t.is_alive()]
        if dead and not self.stop_requested.is_set():
            return False, f"worker threads stopped: {', '.join(dead)}"
        return True, "ok"

    def purge(self) -> None:
        """Delete finished messages older than ``retention_days``."""
        counts = purge(self.store, timedelta(days=self.production.retention_days),
                       self.clock.now())
        if counts.messages:
            log.info("purged %d finished message(s) older than %g days", counts.messages,
                     self.production.retention_days)

    def _operations(self) -> list[ItemConfig]:
        return [i for i in self.production.items if issubclass(i.cls, BusinessOperation)]

    def _start_item(self, item: ItemConfig) -> None:
        runner = ItemRunner(item, store=self.store, clock=self.clock, owner=self.id,
                            lease_seconds=self.production.lease_seconds,
                            poll_interval=self.production.poll_interval, env=self.env,
                            events=self.events, metrics=self.metrics)
        self.runners[item.name] = runner
        runner.start()

    def _reap_dead_local_daemons(self) -> None:
        """A daemon of this host whose process is gone (kill -9) holds claims that would
        otherwise wait for their leases to expire: release them now."""
        for daemon_id, pid in self.store.local_daemons(self.host):
            if _process_alive(pid):
                continue
            released = self.store.release_claims(daemon_id)
            self.store.unregister_daemon(daemon_id)
            log.warning("daemon %s (pid %d) died; %d message(s) it held are back in their "
                        "queues", daemon_id, pid, released)

    def heartbeat(self) -> None:
        """Mark this daemon alive and renew the leases of the messages it holds."""
        self.store.heartbeat(self.id, now=self.clock.now(),
                             lease_seconds=self.production.lease_seconds)

    def check_queue_alerts(self) -> None:
        """``queue_count_alert`` / ``queue_wait_alert``: one Alert per crossing."""
        watched = [i for i in self._operations()
                   if i.settings["queue_count_alert"] or i.settings["queue_wait_alert"]]
        if not watched:
            return
        stats, now = queries.queue_stats(self.store), self.clock.now()
        for item in watched:
            s = stats.get(item.name, {})
            depth = s.get("queued", 0)
            wait = (now - s["oldest"]).total_seconds() if s.get("oldest") else 0.0
            for kind, threshold, value, text in (
                    ("count", item.settings["queue_count_alert"], depth,
                     f"queue of {item.name} holds {depth} messages "
                     f"(queue_count_alert = {item.settings['queue_count_alert']})"),
                    ("wait", item.settings["queue_wait_alert"], wait,
                     f"oldest message of {item.name} has waited {wait:.0f} s "
                     f"(queue_wait_alert = {item.settings['queue_wait_alert']:g} s)")):
                alarm = self._alarms.setdefault((item.name, kind), ThresholdAlarm(threshold))
                if alarm.crossed(value):
                    self.events.write("Alert", text, config_name=item.name,
                                      source_class="Daemon", source_method="check_queue_alerts")

    def stop(self) -> bool:
        """Stop intake (services first, then workers), wait for in-flight attempts with one
        overall timeout, unregister. Returns True when every worker stopped in time."""
        deadline = self.clock.monotonic() + self.production.shutdown_timeout
        for runner in self.runners.values():
            runner.request_stop()
        clean = self.scheduler.shutdown(wait=True, timeout=self.production.shutdown_timeout)
        clean = all([runner.join(max(deadline - self.clock.monotonic(), 0.0))
                     for runner in self.runners.values()]) and clean
        if self.metrics_server is not None:
            self.metrics_server.stop()
        try:
            if not clean:
                self.store.release_claims(self.id)
            self.store.unregister_daemon(self.id)
        except EncoreError as exc:
            log.error("could not unregister daemon: %s", exc)
        log.info("production %s stopped%s", self.production.name,
                 "" if clean else " (attempts cut short count as outcome unknown)")
        return clean

    # -- reload --------------------------------------------------------------------------
    def reload(self) -> None:
        """Re-read the production file; restart changed items, keep the others running."""
        if self.production.path is None:
            log.warning("reload requested, but the production did not come from a file")
            return
        try:
            new = load_production(self.production.path, self.env)
        except EncoreError as exc:
            log.error("reload refused, the production keeps running unchanged: %s", exc)
            return
        old_items = {i.name: i for i in self._operations()}
        self.production = new
        self.events.production = new
        new_items = {i.name: i for i in self._operations()}
        for name, item in old_items.items():
            if new_items.get(name) != item:
                runner = self.runners.pop(name)
                runner.request_stop()
                runner.join(new.shutdown_timeout)
        for name, item in new_items.items():
            if name not in self.runners:
                self._start_item(item)
        log.info("production reloaded from %s: %d item(s) running", new.path, len(self.runners))

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> None:
        """Run until SIGTERM or SIGINT; SIGHUP reloads the production file."""
        self._install_signal_handlers()
        self.start()
        try:
            while not self.stop_requested.is_set():
                self.wake.wait(SIGNAL_POLL)
                self.wake.clear()
                if self.reload_requested.is_set() and not self.stop_requested.is_set():
                    self.reload_requested.clear()
                    self.reload()
        finally:
            self.stop()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def request(signum: int, _frame: Any) -> None:
            log.info("received %s", signal.Signals(signum).name)
            flag = self.reload_requested if signum == signal.SIGHUP else self.stop_requested
            flag.set()
            self.wake.set()

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, request)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
