"""The daemon: runs a production until told to stop.

Its work is one step, :meth:`Daemon.step`: the heartbeat (:mod:`engine.runtime.membership`), a
reload or restart asked for, the scheduler's due jobs, the console's counters and the items' due
work. The loop of ``encore run`` waits between steps as long as the step says. Where the work runs
is the :class:`~engine.runtime.execution.Runtime` it is given: on threads in real time (the items on
their own, slow jobs and reloads on pools, so the heartbeat is never late), or all on the caller's
thread on a virtual clock. Stop, reload and leases: docs/architecture.md and docs/scale-out.md.
"""
from __future__ import annotations

import logging
import os
import random
import signal
import socket
import threading
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engine.clock import Clock
from engine.config.production import ItemConfig, ProductionConfig
from engine.delivery.guards import ItemGuards
from engine.delivery.item import ItemRunner
from engine.errors import EncoreError
from engine.observe.logs import limit_repeats
from engine.observe.metrics import Metrics, MetricsServer
from engine.otel import tracing_for
from engine.runtime.alerts import AlertingEventLog
from engine.runtime.announcements import AnnouncementRouter
from engine.runtime.cluster import LEADER, DatabaseClock, pid_namespace
from engine.runtime.console import ConsoleReport
from engine.runtime.execution import Runtime, ThreadedRuntime
from engine.runtime.lifecycle import LifecycleLog, LifeStep, record_failed_start
from engine.runtime.membership import Membership
from engine.runtime.queue_alerts import QueueAlerts
from engine.runtime.reload import Reloader
from engine.runtime.roster import ItemRoster, MiddlewareFactory
from engine.runtime.scheduler import ProductionScheduler
from engine.runtime.steps import TICK_RETRY_DELAY, guarded, operation_items
from engine.store import queries
from engine.store.filewatch import DatabaseFileWatch
from engine.store.operator import purge
from engine.store.sql import SqlStore

if TYPE_CHECKING:
    from adapters.base import OutboundAdapter
    from engine.inbound.server import InboundServer

log = logging.getLogger(__name__)

PURGE_INTERVAL = 3600.0  # seconds between purges for retention_days
SIGNAL_POLL = 1.0  # seconds the loop waits at most between steps (signals wake it sooner)


class Daemon:
    """One running production."""

    def __init__(self, production: ProductionConfig, *, store: SqlStore | None = None,
                 clock: Clock | None = None, env: Mapping[str, str] | None = None,
                 adapters: Mapping[str, OutboundAdapter] | None = None,
                 rng: random.Random | None = None, runtime: Runtime | None = None,
                 middleware: Sequence[MiddlewareFactory] = ()) -> None:
        """``adapters``: used instead of building the items' own; ``rng``: jitter source;
        ``runtime``: where the work runs (default: threads, in real time); ``middleware``: made
        for each item by name, after tracing."""
        self.production = production
        self.store = store or SqlStore(production.database)
        self.clock = clock or DatabaseClock(self.store)
        self.env = os.environ if env is None else env
        self.runtime = runtime or ThreadedRuntime()
        self.host = socket.gethostname()
        self.id = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.wake = threading.Event()
        self.stop_requested = threading.Event()
        self.runners: dict[str, ItemRunner] = {}
        self.events = AlertingEventLog(self.store.events, self.store, production)
        self.lifecycle = LifecycleLog(self.events, self.id)
        self.stop_reason = "stopped by its caller"
        self.metrics = Metrics()
        self.membership = Membership(
            self.store, self.clock, daemon_id=self.id, host=self.host,
            pid_namespace=pid_namespace(), production=lambda: self.production,
            runners=self.runners, lifecycle=self.lifecycle,
            file_watch=DatabaseFileWatch(self.store), stop=self._stop_soon)
        self.leases = self.membership.leases
        self.scheduler = ProductionScheduler(production, store=self.store, clock=self.clock,
                                             events=self.events, leader=self.is_leader)
        self.metrics_server: MetricsServer | None = None
        self.portal: Any = None
        self.inbound: InboundServer | None = None
        self.tracing = tracing_for(production)  # None: tracing off (read at start only)
        self.roster = ItemRoster(
            store=self.store, clock=self.clock, owner=self.id,
            production=lambda: self.production, env=self.env, events=self.events,
            metrics=self.metrics, leases=self.leases, runtime=self.runtime, runners=self.runners,
            middleware=(*([self.tracing.item] if self.tracing is not None else []),
                        *middleware), adapters=adapters, rng=rng)
        self._loop_thread: threading.Thread | None = None
        self.reloader = Reloader(self)
        self.queue_alerts = QueueAlerts(self.store, self.clock, self.events, self._operations)
        self.announcements = AnnouncementRouter(self.store, self.runners,
                                                reload=self.reloader.request,
                                                restart=self.reloader.request_restart)
        self.console = ConsoleReport(self.store, self.clock, self.id, runners=self.runners,
                                     reloader=self.reloader, items=self._operations,
                                     leader=self.is_leader, inbound=self._inbound_names)
        self.metrics.rollup = self.console.rollup

    def start(self, *, background: bool = True) -> None:
        """Build what can fail, then register, take leases and start items and scheduler.
        ``background``: loop on a thread (else the caller runs :meth:`step`, or :meth:`run`)."""
        self.store.check_schema()
        self.membership.sync_clock()
        try:
            runners = self._prepare_start()
        except Exception as exc:
            record_failed_start(self.store.events, self.id, self.production.name, exc)
            raise
        self.membership.join(self._operations())
        self.runtime.listen(self.announcements)
        for runner in runners.values():
            self.roster.launch(runner)
        self.console.report_states()
        self._start_scheduler()
        if background:
            self._loop_thread = threading.Thread(target=self._loop, daemon=True,
                                                 name="encore-daemon")
            self._loop_thread.start()
        if self.production.portal is not None:
            from engine.portal.server import PortalServer

            self.portal = PortalServer(self.store, self.production, self.production.portal,
                                       env=self.env)
            self.portal.start()
        if self.production.inbound is not None:
            from engine.inbound.server import InboundServer

            self.inbound = InboundServer(self.store, self.production, self.production.inbound)
            self.inbound.start()
            self.console.report_states()
        waiting = [f"{r.item.name} ({r.not_ready_reason or 'starting'})"
                   for r in self.runners.values() if not r.ready]
        not_ready = (f"; {len(waiting)} item(s) not ready, their messages stay queued: "
                     + "; ".join(waiting)) if waiting else ""
        self.lifecycle.write("Info", LifeStep.START, (
            f"production {self.production.name} started: {len(self.runners)} item(s), daemon "
            f"{self.id}{' (leader)' if self.is_leader() else ''}{not_ready}"))

    def _prepare_start(self) -> dict[str, ItemRunner]:
        """Prepare every item's runner and serve the metrics endpoint; on failure, undo it all."""
        runners = self.roster.build_runners(self._operations())
        try:
            self._start_metrics()
        except Exception:
            for runner in runners.values():
                runner.discard()
            raise
        return runners

    def _start_scheduler(self) -> None:
        """Start the housekeeping jobs (the heartbeat is the loop's own)."""
        self.queue_alerts.schedule(self.scheduler)
        self.scheduler.add_housekeeping("forget_dead_daemons", self.production.lease_seconds,
                                        self.membership.forget_dead_daemons, leader_only=True)
        if self.production.retention_days > 0:
            self.scheduler.add_housekeeping("purge", PURGE_INTERVAL, self.purge,
                                            leader_only=True)
        self.runtime.start_jobs(self.scheduler)

    def guards(self, name: str) -> ItemGuards | None:
        """The guards of the running item ``name`` (None: not running)."""
        runner = self.runners.get(name)
        return None if runner is None else runner.guards

    def is_leader(self) -> bool:
        """True while this daemon holds the leader lease."""
        return self.leases.holds(LEADER)

    def _start_metrics(self) -> None:
        if not self.production.metrics_port:
            return
        self.metrics.set_queue_depth_source(self._queue_depths)
        self.metrics_server = MetricsServer(self.metrics, host=self.production.metrics_host,
                                            port=self.production.metrics_port, health=self.health)
        self.metrics_server.start()
        log.info("metrics and /healthz on %s", self.metrics_server.url)
        exposed = self.metrics_server.exposure_warning()
        if exposed is not None:
            self.events.write("Warning", exposed, source_class="Daemon", source_method="start")

    def _queue_depths(self) -> dict[str, int]:
        stats = queries.queue_stats(self.store)
        return {i.name: stats.get(i.name, {}).get("queued", 0) for i in self._operations()}

    def health(self) -> tuple[bool, str]:
        """(healthy, reason): the database answers and every worker thread is alive."""
        try:
            queries.daemons(self.store)
        except EncoreError as exc:
            log.warning("health check: database unavailable: %s", exc)
            return False, "database unavailable"
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

    def _inbound_names(self) -> list[str]:
        """The inbound services this daemon serves (none without its inbound server)."""
        server = self.inbound
        return [service.name for service in server.services] if server is not None else []

    def _operations(self) -> list[ItemConfig]:
        return operation_items(self.production)

    def _stop_soon(self) -> None:
        self.stop_requested.set()
        self.wake.set()

    def check_queue_alerts(self) -> None:
        """``queue_count_alert`` / ``queue_wait_alert``: one Alert per crossing."""
        self.queue_alerts.check()

    def stop(self) -> bool:
        """Stop intake, wait for in-flight attempts with one overall timeout, unregister. Heartbeats
        go on until the workers joined, so their claims are not taken over. True if every worker
        stopped in time."""
        deadline = self.clock.monotonic() + self.production.shutdown_timeout
        self.stop_requested.set()
        self.wake.set()
        if self._loop_thread is not None and self._loop_thread is not threading.current_thread():
            self._loop_thread.join()
        self.reloader.finish()
        if self.inbound is not None:
            self.inbound.stop()
        if self.portal is not None:
            self.portal.stop()
        self.scheduler.stop_services()
        for runner in self.runners.values():
            runner.request_stop()
        self.store.completions.wake_all()  # processes waiting on a sync call see the stop
        clean = self._join_runners(list(self.runners.values()), deadline)
        clean = self.scheduler.shutdown(
            wait=True, timeout=max(deadline - self.clock.monotonic(), 0.0)) and clean
        self.runtime.stop_listening(self.announcements)
        for runner in self.runners.values():
            runner.guards.close()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        if self.tracing is not None:
            self.tracing.flush()
        guarded(self.flush_rollup, "the console's counters")
        self.lifecycle.write("Info" if clean else "Warning", LifeStep.STOP, (
            f"production {self.production.name} stopped: daemon {self.id}, "
            f"{self.stop_reason}"
            f"{'' if clean else '; attempts cut short count as outcome unknown'}"))
        self.membership.leave(clean=clean)
        return clean

    def _join_runners(self, runners: list[ItemRunner], deadline: float) -> bool:
        """Wait for ``runners`` until ``deadline``, beating the heartbeat meanwhile."""
        waiting = list(runners)
        while waiting and (left := deadline - self.clock.monotonic()) > 0:
            beat_in = self.membership.beat_if_due(self.clock.monotonic())
            if waiting[0].wait_stopped(min(left, max(beat_in, 0.01))):
                waiting.pop(0)
        return all([runner.join(max(deadline - self.clock.monotonic(), 0.0))
                    for runner in runners])

    def reload(self) -> None:
        """Re-read the production file, all or nothing."""
        self.reloader.reload()

    def request_restart(self, name: str) -> None:
        """Restart item ``name`` (as an operator's restart does), on the reload thread."""
        self.reloader.request_restart(name)

    def step(self, now: float) -> float:
        """Do what is due at monotonic ``now``: the heartbeat, a reload or restart asked for, the
        scheduler's jobs, the console's report and the items' work. Returns the seconds until the
        next step is needed; a part that fails is logged and tried again, never ends the loop."""
        beat = self.membership.beat_if_due(now)
        self.reloader.reload_if_asked()
        waits = [beat, guarded(self.scheduler.tick, "the scheduler"),
                 guarded(lambda: self._console(now), "the console's counters"),
                 self.runtime.step_items(self.runners.values())]
        return max(min(w for w in waits if w is not None), 0.0)

    def _console(self, now: float) -> float | None:
        """Run the restarts asked for, then the console's report."""
        self.reloader.restart_if_asked()
        return self.runtime.upkeep_wait(self.console.tick(now))

    def flush_rollup(self, now: float | None = None) -> None:
        """Write the per-minute counters that changed; the leader also deletes old rows."""
        self.console.flush_rollup(now)

    def item_states(self) -> dict[str, dict[str, Any]]:
        """What this daemon runs of each item, as ``daemon.item_states`` records it."""
        return self.console.item_states()

    def _loop(self) -> None:
        """Step until a stop is requested, waiting between steps on :attr:`wake`."""
        while not self.stop_requested.is_set():
            self.wake.clear()
            try:
                wait = self.step(self.clock.monotonic())
            except Exception:
                log.exception("unexpected error in the daemon's loop")
                wait = TICK_RETRY_DELAY
            self.wake.wait(min(wait, SIGNAL_POLL))

    def run(self) -> None:
        """Run until SIGTERM or SIGINT; SIGHUP reloads the production file."""
        limit_repeats()
        self._install_signal_handlers()
        self.start(background=False)
        try:
            self._loop()
        except BaseException as exc:
            self.stop_reason = f"on an error: {type(exc).__name__}: {exc}"
            raise
        finally:
            self.stop()
        self.membership.file_watch.raise_if_lost()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def request(signum: int, _frame: Any) -> None:
            log.info("received %s", signal.Signals(signum).name)
            if signum == signal.SIGHUP:
                self.reloader.request()
            else:
                self.stop_reason = f"on {signal.Signals(signum).name}"
                self.stop_requested.set()
                self.wake.set()

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, request)
