"""The daemon: runs a production until told to stop.

Operation items run on their own worker threads (:class:`~engine.delivery.item.ItemRunner`). The
daemon's own periodic work is one loop: :meth:`Daemon.tick` does what is due — the heartbeat
and lease renewal, a reload asked for by SIGHUP, the scheduler's jobs (business services,
queue alerts, forgetting silent daemons, purge for ``retention_days``) — and returns the
seconds until it is needed again; ``run()`` waits that long on an event that the signal
handlers set (they only set events). The heartbeat runs on the loop's thread itself, and
what may be slow (a service, a purge, a reload) on other threads, so it is never late.
Shutdown stops intake first, then waits for the workers with one overall timeout
(``shutdown_timeout``), beating the heartbeat until they have joined; messages still in hand
go back to their queue, and their open attempts count as outcome unknown on the next start.

Started ``inline`` the daemon starts no thread at all: items deliver and jobs run inside
``tick()`` on the caller's thread. :class:`engine.testing.VirtualDaemon` drives it so on a
virtual clock, advancing the clock to each wake-up ``tick()`` returns.
SIGHUP reloads the production file, all or nothing: new and changed items are built first,
and if one of them cannot start the reload is refused; else changed items restart and the
others keep running.

Several daemons may share one database (docs/architecture.md, docs/scale-out.md): each claims
messages under a lease its heartbeat renews; the ``leader`` lease decides which one runs
business services and leader-only housekeeping; an ``item:<name>`` lease decides which one
works a FIFO item (:mod:`engine.runtime.cluster`). On PostgreSQL a listener thread wakes the workers
of an item as soon as any daemon announces work for it.

For the operator's console (docs/portal.md) the loop also writes what runs — ``daemon.items``
and ``daemon.item_states``, when they change and at every reload — and flushes the items'
per-minute counters (:mod:`engine.store.rollup`) every couple of seconds; an operator's
restart of an item and an admin's Reload arrive as announcements and run on the reload
thread, one at a time.

The :class:`Daemon` is the lifecycle — start, the loop, stop, the heartbeat, the signals —
and composes what does one thing each: the :class:`~engine.runtime.reload.Reloader` (reloads
and restarts), the :class:`~engine.runtime.queue_alerts.QueueAlerts`, the
:class:`~engine.runtime.announcements.AnnouncementRouter` (which announcement goes to which
item runner) and the :class:`~engine.runtime.console.ConsoleReport`. Each item runner owns
its guards (:attr:`ItemRunner.guards <engine.delivery.item.ItemRunner.guards>`).
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
        """``adapters``: the adapter to use for the item of that name instead of one built
        from its class (tests, ``encore simulate``); ``rng``: the workers' source of jitter
        (None: a fresh one each)."""
        self.production = production
        self.store = store or SqlStore(production.database)
        self.file_watch = DatabaseFileWatch(self.store)  # SQLite: the file still at its path?
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
        self.stop_reason = "stopped by its caller"  # a signal or an error says otherwise
        self.metrics = Metrics()
        self.leases = LeaseKeeper(self.store, self.id, clock=self.clock,
                                  lease_seconds=production.lease_seconds,
                                  retry_seconds=production.poll_interval,
                                  on_change=self._lease_changed)
        self.scheduler = ProductionScheduler(production, store=self.store, clock=self.clock,
                                             events=self.events, leader=self.is_leader)
        self.metrics_server: MetricsServer | None = None
        self.portal: Any = None  # engine.portal.server.PortalServer, with [portal]
        self.inbound: InboundServer | None = None  # with [inbound]
        self.tracing = tracing_for(production)  # None: tracing off (read at start only)
        self.adapters = dict(adapters or {})
        self.rng = rng
        self.inline = False  # start(inline=True): no threads, tick() does everything
        self._loop_thread: threading.Thread | None = None
        self._next_beat = 0.0  # monotonic seconds of the next heartbeat
        self._beat_lock = threading.Lock()
        # what does one thing each (the module docstring)
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
        """Leadership changes are the production's life; a FIFO item's lease, the log's."""
        self.lifecycle.lease(name, took, record=name == LEADER)

    @property
    def heartbeat_interval(self) -> float:
        return self.production.lease_seconds / 3

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, *, background: bool = True, inline: bool = False) -> None:
        """Check the schema; build every operation item (adapter, hosts, ``on_init``) and
        open the metrics endpoint — what can fail, before anything runs; then reclaim the
        work of dead daemons of this host, register, take the leases that are free, and
        start the items and the scheduler. A start that fails leaves nothing running and
        nothing registered: no attempt can have begun.

        ``background``: run the tick loop on a thread of the daemon's own (``run()`` passes
        False and runs it itself). ``inline``: start no thread at all — the caller drives the
        daemon with :meth:`tick`, which then also delivers (the virtual-clock harness)."""
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
        if self.production.portal is not None:  # [portal]: the portal on a thread of ours
            from engine.portal.server import PortalServer

            self.portal = PortalServer(self.store, self.production, self.production.portal,
                                       env=self.env)
            self.portal.start()
        if self.production.inbound is not None:  # [inbound]: the inbound services, likewise
            from engine.inbound.server import InboundServer

            self.inbound = InboundServer(self.store, self.production, self.production.inbound)
            self.inbound.start()
            self.console.report_states()  # its services run here now
        waiting = [f"{r.item.name} ({r.not_ready_reason or 'starting'})"
                   for r in self.runners.values() if not r.ready]
        not_ready = (f"; {len(waiting)} item(s) not ready, their messages stay queued: "
                     + "; ".join(waiting)) if waiting else ""
        self.lifecycle.write("Info", LifeStep.START, (
            f"production {self.production.name} started: {len(self.runners)} item(s), daemon "
            f"{self.id}{' (leader)' if self.is_leader() else ''}{not_ready}"))

    def _record_failed_start(self, exc: Exception) -> None:
        """One ``Error`` of the production's life for a start that fails, not logged:
        ``encore run`` says it in one line. A database that cannot take it is no matter."""
        try:
            self.store.events.write(
                "Error", f"daemon {self.id} could not start production "
                f"{self.production.name}: {exc}", config_name=getattr(exc, "item", None),
                job=self.id, source_class=SOURCE_CLASS, source_method=LifeStep.START,
                echo=False)
        except Exception as write_error:  # the start's own error goes on
            log.debug("the failed start is not in the event log: %s", write_error)

    def _prepare_start(self) -> dict[str, ItemRunner]:
        """Every operation item's runner, prepared, and the metrics endpoint serving; if
        one of them fails, nothing of the others is left."""
        runners = self.build_runners(self._operations())
        try:
            self._start_metrics()
        except Exception:
            for runner in runners.values():
                runner.discard()
            raise
        return runners

    def _start_scheduler(self) -> None:
        """The housekeeping jobs (the heartbeat is the loop's own, see :meth:`tick`); in real
        time the scheduler runs them, and the services, on its thread pool."""
        self.queue_alerts.schedule(self.scheduler)
        self.scheduler.add_housekeeping("forget_dead_daemons", self.production.lease_seconds,
                                        self.forget_dead_daemons, leader_only=True)
        if self.production.retention_days > 0:
            self.scheduler.add_housekeeping("purge", PURGE_INTERVAL, self.purge,
                                            leader_only=True)
        if self.inline:
            self.scheduler.open()
        else:
            self.scheduler.start(loop=False)  # the daemon's loop ticks it

    def guards(self, name: str) -> ItemGuards | None:
        """The rate limit and circuit breaker of the running item ``name`` (None: no such
        item running)."""
        runner = self.runners.get(name)
        return None if runner is None else runner.guards

    def is_leader(self) -> bool:
        """True while this daemon holds the leader lease: its scheduler runs business
        services and leader-only housekeeping."""
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
        except EncoreError as exc:  # the driver's details to the log, not to the caller
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
        """A prepared runner for each of ``items``; if one fails, tear down the others and
        raise its error."""
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
        """``item``'s runner, prepared — adapter made, hosts made, ``on_init`` called — but
        not started. Raises :class:`EncoreError` naming the item; nothing of it is left."""
        lease = None
        if is_fifo(item):
            lease = functools.partial(self.leases.hold, item_lease_name(item.name))
        stop = threading.Event()
        guards = ItemGuards.for_item(item, store=self.store, clock=self.clock, owner=self.id,
                                     events=self.events, metrics=self.metrics, stop=stop,
                                     lease_seconds=self.production.lease_seconds)
        # the item's middleware after its guards: tracing (its spans), then the metrics
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
        """A dead daemon of this host (killed: its PID gone, a zombie or recycled) holds
        claims and leases that would otherwise wait for their expiry: release them now. At
        start and on every heartbeat: a few reads of ``/proc``."""
        reap_dead_local_daemons(self.store, self.host, self.pid_namespace, self.lifecycle)

    def forget_dead_daemons(self) -> None:
        """Take daemons silent for ``FORGET_AFTER_LEASES`` lease periods off the list (their
        leases expired long ago; this only tidies ``encore status``)."""
        silent = FORGET_AFTER_LEASES * self.production.lease_seconds
        forget_silent_daemons(self.store, silent_seconds=silent, now=self.clock.now(),
                              lifecycle=self.lifecycle)

    def heartbeat(self) -> None:
        """Mark this daemon alive, renew the leases of the messages it holds, renew its
        leader and item leases and take those that are free; then forget the dead daemons
        of this host (:meth:`_reap_dead_local_daemons`)."""
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
        """Re-read the database's clock (at start and on every heartbeat). On SQLite, whose
        clock is this host's wall clock, first carry the stored due times and leases across
        a step of it, once for every daemon of the file
        (:func:`~engine.store.clockstep.settle_clock_frame`)."""
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
            self.clock.sync(reading)  # no step: nothing stored to carry
            return
        # One reading for the stored times and this daemon's clock, and no time read by
        # this daemon's threads until both are across the step: a retry parked between
        # the two on the clock's old time would stay a whole step early or late.
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
        """Stop intake (services first, then workers), wait for in-flight attempts with one
        overall timeout, unregister. Heartbeats go on until the workers have joined, so the
        claims of attempts still in flight are not taken over meanwhile. Returns True when
        every worker stopped in time."""
        deadline = self.clock.monotonic() + self.production.shutdown_timeout
        self.stop_requested.set()
        self.wake.set()
        if self._loop_thread is not None and self._loop_thread is not threading.current_thread():
            self._loop_thread.join()  # it ends after its tick; this thread beats from now on
        self.reloader.finish()
        if self.inbound is not None:  # intake first: inbound services take messages in
            self.inbound.stop()
        if self.portal is not None:  # intake first: the portal's API takes messages in
            self.portal.stop()
        self.scheduler.stop_services()
        for runner in self.runners.values():
            runner.request_stop()
        self.store.completions.wake_all()  # processes waiting on a sync call see the stop
        clean = self._join_runners(list(self.runners.values()), deadline)
        clean = self.scheduler.shutdown(
            wait=True, timeout=max(deadline - self.clock.monotonic(), 0.0)) and clean
        self.announcements.stop_listening(others=not self.inline)
        for runner in self.runners.values():  # also those that did not stop in time
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
        """Wait for ``runners`` until ``deadline`` (monotonic), beating the heartbeat
        meanwhile — the loop has ended, and a claim of an attempt still in flight must not
        expire and be taken over (dramatiq ``Worker.stop``) — then join them."""
        waiting = list(runners)
        while waiting and (left := deadline - self.clock.monotonic()) > 0:
            beat_in = self._beat_if_due(self.clock.monotonic())
            if waiting[0].wait_stopped(min(left, max(beat_in, 0.01))):
                waiting.pop(0)
        return all([runner.join(max(deadline - self.clock.monotonic(), 0.0))
                    for runner in runners])

    # -- reload and restart (engine.runtime.reload) ----------------------------------------
    def reload(self) -> None:
        """Re-read the production file, all or nothing (:meth:`Reloader.reload
        <engine.runtime.reload.Reloader.reload>`)."""
        self.reloader.reload()

    def request_restart(self, name: str) -> None:
        """Restart item ``name`` (as an operator's restart does), on the reload thread."""
        self.reloader.request_restart(name)

    # -- the loop ------------------------------------------------------------------------
    def tick(self, now: float | None = None) -> float:
        """One pass of the daemon's periodic work at ``now`` (monotonic seconds of its clock;
        default: the clock's): the heartbeat when due, a reload when asked for, the
        scheduler's due jobs and, started ``inline``, every item's dispatcher step and its
        deliveries. Returns the seconds until the next pass is needed (0: at once); a
        wake-up — a signal, a stop — may come sooner. A step that fails is logged and tried
        again later; it never ends the loop."""
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
                except Exception as exc:  # the loop outlives a failed beat
                    log.error("heartbeat failed; trying again in %.0f s: %s",
                              TICK_RETRY_DELAY, exc)
                    self._next_beat = now + min(TICK_RETRY_DELAY, self.heartbeat_interval)
            return self._next_beat - now

    def _tick_scheduler(self) -> float | None:
        """The scheduler's due jobs: on its thread pool in real time (a slow service or
        purge must not hold up the heartbeat), in this thread inline."""
        if not self.inline:
            return guarded(self.scheduler.tick, "the scheduler")
        guarded(lambda: self.scheduler.run_due(self.clock.now()), "the scheduler")
        return self.scheduler.seconds_until_next(self.clock.now())

    # -- the console (docs/portal.md, engine.runtime.console) ------------------------------
    def _console(self, now: float) -> float | None:
        """Restarts asked for, then the console's report (:meth:`ConsoleReport.tick
        <engine.runtime.console.ConsoleReport.tick>`)."""
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
            self.wake.clear()  # before the tick: a wake-up during it is not lost
            try:
                wait = self.tick()
            except Exception:  # the loop must outlive one bad tick
                log.exception("unexpected error in the daemon's loop")
                wait = TICK_RETRY_DELAY
            self.wake.wait(min(wait, SIGNAL_POLL))

    def run(self) -> None:
        """Run until SIGTERM or SIGINT; SIGHUP reloads the production file. The loop of
        :meth:`tick` runs in this thread; the signal handlers only set events."""
        limit_repeats()  # a failure that repeats per message is logged once a minute
        self._install_signal_handlers()
        self.start(background=False)
        try:
            self._loop()
        except BaseException as exc:
            self.stop_reason = f"on an error: {type(exc).__name__}: {exc}"
            raise
        finally:
            self.stop()
        self.file_watch.raise_if_lost()  # a non-zero exit, saying why

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
