"""The daemon: runs a production until told to stop.

Items run on their own threads (:class:`~engine.delivery.item.ItemRunner`); the daemon's own
periodic work is one loop, :meth:`Daemon.tick`, whose heartbeat runs on the loop's thread while slow
work (services, purges, reloads) runs elsewhere, so the heartbeat is never late. Started ``inline``
it starts no thread and ``tick()`` also delivers (the virtual-clock harness). Stop, reload and
leases: docs/architecture.md and docs/scale-out.md.
"""
from __future__ import annotations

import functools
import logging
import os
import random
import signal
import socket
import threading
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engine.clock import Clock
from engine.config.production import ItemConfig, ProductionConfig
from engine.delivery.guards import ItemGuards
from engine.delivery.item import ItemContext, ItemRunner
from engine.errors import EncoreError
from engine.observe.logs import limit_repeats
from engine.observe.metrics import ItemMetrics, Metrics, MetricsServer
from engine.otel import tracing_for
from engine.runtime.alerts import AlertingEventLog
from engine.runtime.announcements import AnnouncementRouter
from engine.runtime.cluster import (
    LEADER,
    STEP_SECONDS,
    DatabaseClock,
    LeaseKeeper,
    boot_id,
    forget_silent_daemons,
    is_fifo,
    item_lease_name,
    pid_namespace,
    reap_dead_local_daemons,
)
from engine.runtime.console import ConsoleReport
from engine.runtime.lifecycle import SOURCE_CLASS, LifecycleLog, LifeStep
from engine.runtime.liveness import process_start
from engine.runtime.queue_alerts import QueueAlerts
from engine.runtime.reload import Reloader
from engine.runtime.scheduler import ProductionScheduler
from engine.runtime.steps import TICK_RETRY_DELAY, guarded, operation_items
from engine.store import queries
from engine.store.clockstep import frame_settled, settle_clock_frame
from engine.store.filewatch import DatabaseFileWatch
from engine.store.operator import purge
from engine.store.sql import SqlStore

if TYPE_CHECKING:
    from adapters.base import OutboundAdapter
    from engine.inbound.server import InboundServer

log = logging.getLogger(__name__)

PURGE_INTERVAL = 3600.0  # seconds between purges for retention_days
SIGNAL_POLL = 1.0  # seconds the loop waits at most between ticks (signals wake it sooner)
FORGET_AFTER_LEASES = 10  # a daemon silent for this many lease_seconds is taken off the list


class Daemon:
    """One running production."""

    def __init__(self, production: ProductionConfig, *, store: SqlStore | None = None,
                 clock: Clock | None = None, env: Mapping[str, str] | None = None,
                 adapters: Mapping[str, OutboundAdapter] | None = None,
                 rng: random.Random | None = None) -> None:
        """``adapters``: used instead of building the items' own; ``rng``: jitter source."""
        self.production = production
        self.store = store or SqlStore(production.database)
        self.file_watch = DatabaseFileWatch(self.store)
        self.clock = clock or DatabaseClock(self.store)
        self.env = os.environ if env is None else env
        self.host = socket.gethostname()
        self.pid_namespace = pid_namespace()
        self.id = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.wake = threading.Event()
        self.stop_requested = threading.Event()
        self.runners: dict[str, ItemRunner] = {}
        self.events = AlertingEventLog(self.store.events, self.store, production)
        self.lifecycle = LifecycleLog(self.events, self.id)
        self.stop_reason = "stopped by its caller"
        self.metrics = Metrics()
        self.leases = LeaseKeeper(self.store, self.id, clock=self.clock,
                                  lease_seconds=production.lease_seconds,
                                  retry_seconds=production.poll_interval,
                                  on_change=self._lease_changed)
        self.scheduler = ProductionScheduler(production, store=self.store, clock=self.clock,
                                             events=self.events, leader=self.is_leader)
        self.metrics_server: MetricsServer | None = None
        self.portal: Any = None
        self.inbound: InboundServer | None = None
        self.tracing = tracing_for(production)  # None: tracing off (read at start only)
        self.adapters = dict(adapters or {})
        self.rng = rng
        self.inline = False
        self._loop_thread: threading.Thread | None = None
        self._next_beat = 0.0
        self._beat_lock = threading.Lock()
        self.reloader = Reloader(self)
        self.queue_alerts = QueueAlerts(self.store, self.clock, self.events, self._operations)
        self.announcements = AnnouncementRouter(self.store, self.runners,
                                                reload=self.reloader.request,
                                                restart=self.reloader.request_restart)
        self.console = ConsoleReport(self.store, self.clock, self.id, runners=self.runners,
                                     reloader=self.reloader, items=self._operations,
                                     leader=self.is_leader, inbound=self._inbound_names)
        self.metrics.rollup = self.console.rollup

    def _lease_changed(self, name: str, took: bool) -> None:
        self.lifecycle.lease(name, took, record=name == LEADER)

    @property
    def heartbeat_interval(self) -> float:
        return self.production.lease_seconds / 3

    def start(self, *, background: bool = True, inline: bool = False) -> None:
        """Build what can fail, then register, take leases and start items and scheduler.
        ``background``: loop on a thread; ``inline``: no thread, the caller drives :meth:`tick`."""
        self.inline = inline
        self.store.check_schema()
        self._sync_clock()
        try:
            runners = self._prepare_start()
        except Exception as exc:
            self._record_failed_start(exc)
            raise
        self._reap_dead_local_daemons()
        self.store.register_daemon(self.id, host=self.host, pid=os.getpid(),
                                   pid_namespace=self.pid_namespace,
                                   process_start=process_start(),
                                   production=self.production.name,
                                   items=",".join(i.name for i in self._operations()),
                                   now=self.clock.now())
        self.leases.want(LEADER)
        for item in self._operations():
            if is_fifo(item):
                self.leases.want(item_lease_name(item.name))
        self.leases.renew()
        self.announcements.listen(others=not self.inline)
        for runner in runners.values():
            self.launch(runner)
        self.console.report_states()
        self._start_scheduler()
        self._next_beat = self.clock.monotonic() + self.heartbeat_interval
        if background and not inline:
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

    def _record_failed_start(self, exc: Exception) -> None:
        """Record one ``Error`` event for a failed start, if the database takes it."""
        try:
            self.store.events.write(
                "Error", f"daemon {self.id} could not start production "
                f"{self.production.name}: {exc}", config_name=getattr(exc, "item", None),
                job=self.id, source_class=SOURCE_CLASS, source_method=LifeStep.START,
                echo=False)
        except Exception as write_error:
            log.debug("the failed start is not in the event log: %s", write_error)

    def _prepare_start(self) -> dict[str, ItemRunner]:
        """Prepare every item's runner and serve the metrics endpoint; on failure, undo it all."""
        runners = self.build_runners(self._operations())
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
                                        self.forget_dead_daemons, leader_only=True)
        if self.production.retention_days > 0:
            self.scheduler.add_housekeeping("purge", PURGE_INTERVAL, self.purge,
                                            leader_only=True)
        if self.inline:
            self.scheduler.open()
        else:
            self.scheduler.start(loop=False)

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

    def build_runners(self, items: list[ItemConfig]) -> dict[str, ItemRunner]:
        """A prepared runner for each of ``items``; if one fails, tear down the others and raise."""
        built: dict[str, ItemRunner] = {}
        try:
            for item in items:
                built[item.name] = self.build_runner(item)
        except Exception:
            for runner in built.values():
                runner.discard()
            raise
        return built

    def build_runner(self, item: ItemConfig) -> ItemRunner:
        """``item``'s runner, prepared but not started; raises :class:`EncoreError`."""
        lease = None
        if is_fifo(item):
            lease = functools.partial(self.leases.hold, item_lease_name(item.name))
        stop = threading.Event()
        guards = ItemGuards.for_item(item, store=self.store, clock=self.clock, owner=self.id,
                                     events=self.events, metrics=self.metrics, stop=stop,
                                     lease_seconds=self.production.lease_seconds)
        middleware = (*([self.tracing.item(item.name)] if self.tracing is not None else []),
                      ItemMetrics(self.metrics, item.name))
        runner = ItemRunner(item, ItemContext(
            store=self.store, clock=self.clock, owner=self.id,
            lease_seconds=self.production.lease_seconds,
            poll_interval=self.production.poll_interval, env=self.env, events=self.events,
            lease=lease, production=lambda: self.production, guards=guards,
            middleware=middleware, stop=stop,
            adapter=self.adapters.get(item.name), rng=self.rng))
        guards.wake_with(runner.wakeup.set)
        runner.prepare()
        return runner

    def launch(self, runner: ItemRunner) -> None:
        """Start a prepared runner's threads: from now on it claims messages."""
        if runner.lease is not None:
            self.leases.want(item_lease_name(runner.item.name))
        self.runners[runner.item.name] = runner
        runner.start(threads=not self.inline)

    def _reap_dead_local_daemons(self) -> None:
        """Release the claims and leases of dead daemons of this host now."""
        reap_dead_local_daemons(self.store, self.host, self.pid_namespace, self.lifecycle)

    def forget_dead_daemons(self) -> None:
        """Take daemons silent for ``FORGET_AFTER_LEASES`` lease periods off the list."""
        silent = FORGET_AFTER_LEASES * self.production.lease_seconds
        forget_silent_daemons(self.store, silent_seconds=silent, now=self.clock.now(),
                              lifecycle=self.lifecycle)

    def heartbeat(self) -> None:
        """Mark this daemon alive, renew claims and leases, reap dead local daemons."""
        if not self.file_watch.check(self._file_lost, self._stop_soon):
            return
        self._sync_clock()
        started, runners = self.clock.monotonic(), list(self.runners.values())
        claims = [c for runner in runners for c in runner.claims.held()]
        self.store.heartbeat(self.id, now=self.clock.now(),
                             lease_seconds=self.production.lease_seconds, claims=claims)
        for runner in runners:
            runner.claims.renewed(started)
        self.leases.renew()
        guarded(self._reap_dead_local_daemons, "the scan for dead daemons")

    def _file_lost(self, text: str) -> None:
        self.store.events.write("Error", text, source_class="Daemon",
                                source_method="heartbeat", now=self.clock.now())

    def _stop_soon(self) -> None:
        self.stop_requested.set()
        self.wake.set()

    def _sync_clock(self) -> None:
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
                tolerance=STEP_SECONDS, lease_seconds=self.production.lease_seconds)
            self.clock.sync(reading)
        if step:
            what = ", ".join(f"{n} {kind}" for kind, n in moved.items() if n) or "nothing"
            self.events.write("Warning", f"the wall clock stepped by {step:+.1f} s; "
                              f"daemon {self.id} moved the stored due times and leases "
                              f"with it, so that each keeps the time it had left "
                              f"({what})", source_class="Daemon", source_method="clock")

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
        self.announcements.stop_listening(others=not self.inline)
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
        try:
            if not clean:
                self.store.release_claims(self.id)
            self.leases.release_all()  # after the claims: a FIFO head is back in its queue
            self.store.unregister_daemon(self.id)
        except EncoreError as exc:
            log.error("could not unregister daemon (its leases will expire): %s", exc)
        return clean

    def _join_runners(self, runners: list[ItemRunner], deadline: float) -> bool:
        """Wait for ``runners`` until ``deadline``, beating the heartbeat meanwhile."""
        waiting = list(runners)
        while waiting and (left := deadline - self.clock.monotonic()) > 0:
            beat_in = self._beat_if_due(self.clock.monotonic())
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

    def tick(self, now: float | None = None) -> float:
        """One pass of the periodic work at ``now`` (monotonic; default: the clock's): heartbeat,
        reload, scheduler jobs and, ``inline``, the items' steps. Returns the seconds until the next
        pass; a failed step is logged, never ends the loop."""
        now = self.clock.monotonic() if now is None else now
        beat = self._beat_if_due(now)
        self.reloader.reload_if_asked()
        waits = [beat, self._tick_scheduler(),
                 guarded(lambda: self._console(now), "the console's counters")]
        for runner in list(self.runners.values()) if self.inline else ():
            waits.append(guarded(runner.tick, f"item {runner.item.name}"))
        return max(min(w for w in waits if w is not None), 0.0)

    def _beat_if_due(self, now: float) -> float:
        """The heartbeat if it is due at ``now``; the seconds until the next one."""
        with self._beat_lock:
            if now >= self._next_beat:
                try:
                    self.heartbeat()
                    self._next_beat = now + self.heartbeat_interval
                except Exception as exc:
                    log.error("heartbeat failed; trying again in %.0f s: %s",
                              TICK_RETRY_DELAY, exc)
                    self._next_beat = now + min(TICK_RETRY_DELAY, self.heartbeat_interval)
            return self._next_beat - now

    def _tick_scheduler(self) -> float | None:
        """Run the scheduler's due jobs: on its pool in real time, on this thread inline."""
        if not self.inline:
            return guarded(self.scheduler.tick, "the scheduler")
        guarded(lambda: self.scheduler.run_due(self.clock.now()), "the scheduler")
        return self.scheduler.seconds_until_next(self.clock.now())

    def _console(self, now: float) -> float | None:
        """Run the restarts asked for, then the console's report."""
        self.reloader.restart_if_asked()
        return self.console.tick(now, inline=self.inline)

    def flush_rollup(self, now: float | None = None) -> None:
        """Write the per-minute counters that changed; the leader also deletes old rows."""
        self.console.flush_rollup(now)

    def item_states(self) -> dict[str, dict[str, Any]]:
        """What this daemon runs of each item, as ``daemon.item_states`` records it."""
        return self.console.item_states()

    def _loop(self) -> None:
        """Tick until a stop is requested, waiting between ticks on :attr:`wake`."""
        while not self.stop_requested.is_set():
            self.wake.clear()
            try:
                wait = self.tick()
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
        self.file_watch.raise_if_lost()

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
