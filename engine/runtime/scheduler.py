"""The production's scheduler: business-service polls and the daemon's housekeeping.

APScheduler triggers decide when a job fires, on the scheduler's clock.
:meth:`ProductionScheduler.run_due` runs due jobs on the calling thread (any clock, for tests);
:meth:`ProductionScheduler.tick` hands them to an executor (in real time a thread pool, so a slow
job never delays the daemon's heartbeat). Use one way per scheduler. A job never overlaps itself,
missed fires collapse into one run, and a job's exception becomes an ``Error`` event.
"""
from __future__ import annotations

import functools
import logging
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from engine.clock import Clock, SystemClock
from engine.config.cron import parse_schedule
from engine.config.production import ProductionConfig
from engine.errors import EncoreError
from engine.eventsink import EventSink
from engine.service import BusinessService
from engine.store.sql import SqlStore

__all__ = ["ProductionScheduler", "ScheduledJob"]

log = logging.getLogger(__name__)

SPARE_WORKERS = 2  # threads beyond one per job, for jobs added after start()
IDLE_WAIT = 60.0  # seconds the scheduler's own loop sleeps when no job will fire


@dataclass(eq=False)
class ScheduledJob:
    """One job: what runs, how its trigger is made, and its run state."""

    name: str
    action: Callable[[], object]
    make_trigger: Callable[[datetime], BaseTrigger]
    item: str | None = None
    leader_only: bool = False
    trigger: BaseTrigger | None = None
    next_run_time: datetime | None = None
    last_run_time: datetime | None = None
    runs: int = 0
    failures: int = 0


class ProductionScheduler:
    """Runs every business service of ``production`` on its schedule, plus housekeeping.

    Disabled items are skipped when they fire. ``leader``, when given, is asked before each service
    job and leader-only housekeeping job; False skips that fire.
    """

    def __init__(self, production: ProductionConfig | None = None, *,
                 store: SqlStore | None = None, clock: Clock | None = None,
                 events: EventSink | None = None,
                 leader: Callable[[], bool] | None = None) -> None:
        self.production = production
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.events = events if events is not None else (store.events if store else None)
        self.leader = leader
        self.services: dict[str, BusinessService] = {}
        self._enabled_in_file: dict[str, bool] = {}
        self._jobs: dict[str, ScheduledJob] = {}
        self._lock = threading.RLock()
        self._opened = False
        self._executor: Executor | None = None
        self._loop: threading.Thread | None = None
        self._loop_stop = threading.Event()
        self._nudge = threading.Event()  # wakes the own loop: a job was added, or a stop
        self._idle = threading.Condition()
        self._active: set[str] = set()
        self._stopping = False
        self._services_stopped = False
        self._log_level = logging.INFO
        for item in production.items if production is not None else ():
            if issubclass(item.cls, BusinessService):
                service = item.cls(item.name, item.settings, events=self.events, store=store,
                                   production=production, clock=self.clock)
                self.add_service(service, enabled=item.enabled)

    @property
    def jobs(self) -> list[ScheduledJob]:
        """Every job, in the order they were added."""
        with self._lock:
            return list(self._jobs.values())

    def job(self, name: str) -> ScheduledJob:
        """The job called ``name`` (``service:<item>`` or ``housekeeping:<name>``)."""
        with self._lock:
            return self._jobs[name]

    def add_service(self, service: BusinessService, *, enabled: bool = True) -> ScheduledJob:
        """Poll ``service`` every ``call_interval`` seconds, or on its cron ``schedule``."""
        schedule = service.service_settings.schedule
        make_trigger: Callable[[datetime], BaseTrigger]
        if schedule:
            make_trigger = functools.partial(_cron, schedule)
        else:
            seconds = service.service_settings.call_interval
            make_trigger = functools.partial(_interval, seconds)
        with self._lock:
            self.services[service.name] = service
            self._enabled_in_file[service.name] = enabled
        return self._add(ScheduledJob(
            name=f"service:{service.name}", item=service.name, leader_only=True,
            action=functools.partial(self._process_input, service), make_trigger=make_trigger))

    def add_housekeeping(self, name: str, seconds: float, func: Callable[[], object], *,
                         leader_only: bool = False) -> ScheduledJob:
        """Run ``func()`` every ``seconds`` seconds; ``leader_only``: on the leader only."""
        if seconds <= 0:
            raise ValueError(f"housekeeping job {name!r}: seconds must be > 0, got {seconds!r}")
        return self._add(ScheduledJob(name=f"housekeeping:{name}", action=func,
                                      leader_only=leader_only,
                                      make_trigger=functools.partial(_interval, float(seconds))))

    def _add(self, job: ScheduledJob) -> ScheduledJob:
        with self._lock:
            if job.name in self._jobs:
                raise ValueError(f"a job called {job.name!r} is already scheduled")
            now = self.clock.now()
            job.trigger = job.make_trigger(now)
            job.next_run_time = job.trigger.get_next_fire_time(None, now)
            self._jobs[job.name] = job
        self._nudge.set()
        return job

    def due_jobs(self, now: datetime) -> list[ScheduledJob]:
        """Jobs whose next fire time is at or before ``now`` (aware), earliest first."""
        with self._lock:
            due = [j for j in self._jobs.values()
                   if j.next_run_time is not None and j.next_run_time <= now]
        return sorted(due, key=lambda j: (j.next_run_time, j.name))

    def run_due(self, now: datetime) -> int:
        """Run every job due at ``now`` once on this thread; return how many ran."""
        with self._lock:
            if self._executor is not None:
                raise EncoreError("this scheduler runs in real time (start() was called); "
                                  "run_due() is for schedulers driven by a clock")
            self.open()
            return sum(self._execute(job) for job in self._take_due(now))

    def tick(self, now: datetime | None = None) -> float | None:
        """Hand jobs due at ``now`` (default: the clock's) to the executor; return seconds until
        the next fire, from ``now`` or, by default, from the clock's time once they are handed."""
        given = now
        now = self.clock.now() if now is None else now
        with self._lock:
            executor = self._executor
            if executor is None:
                raise EncoreError("tick() needs a started scheduler; use run_due() on a clock")
            for job in self._take_due(now):
                with self._idle:
                    if job.name in self._active or self._stopping:
                        continue  # never overlaps itself; the fire is missed
                    self._active.add(job.name)
                executor.submit(self._execute, job, claimed=True)
        return self.seconds_until_next(self.clock.now() if given is None else now)

    def _take_due(self, now: datetime) -> list[ScheduledJob]:
        """The jobs due at ``now``, each moved on to its next fire time after ``now``."""
        due = self.due_jobs(now)
        for job in due:
            assert job.trigger is not None and job.next_run_time is not None
            fire = job.next_run_time
            while True:  # skip to the latest fire time not after now
                later = job.trigger.get_next_fire_time(fire, now)
                if later is None or later > now:
                    break
                fire = later
            job.next_run_time = job.trigger.get_next_fire_time(fire, now)
        return due

    def next_run_time(self) -> datetime | None:
        """When the next job is due (None: no job will ever fire again)."""
        with self._lock:
            times = [j.next_run_time for j in self._jobs.values()]
        pending = [t for t in times if t is not None]
        return min(pending) if pending else None

    def seconds_until_next(self, now: datetime) -> float | None:
        """Seconds from ``now`` until the next job is due (0 when overdue; None: never)."""
        nxt = self.next_run_time()
        return None if nxt is None else max((nxt - now).total_seconds(), 0.0)

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`shutdown`."""
        return self._executor is not None

    def open(self) -> None:
        """Call every service's ``on_init`` once; its exception propagates."""
        with self._lock:
            if self._opened:
                return
            with self._idle:
                self._stopping = False
                self._services_stopped = False
            for service in self.services.values():
                service.stop_requested.clear()
                service.on_init()
            self._opened = True

    def start(self, *, loop: bool = True,
              executor: Callable[[str, int], Executor] | None = None) -> None:
        """Run the jobs on ``executor("encore-job", workers)`` (default: a thread pool of its own,
        whose start and stop are logged); ``loop``: also tick on a thread."""
        self._log_level = logging.INFO if executor is None else logging.DEBUG
        make = executor or _thread_pool
        with self._lock:
            if self._executor is not None:
                raise EncoreError("the scheduler is already running")
            self.open()
            self._executor = make("encore-job", len(self._jobs) + SPARE_WORKERS)
            self._loop_stop.clear()
            if loop:
                self._loop = threading.Thread(target=self._run_loop, daemon=True,
                                              name="encore-scheduler")
                self._loop.start()
        log.log(self._log_level, "scheduler started: %d job(s)", len(self._jobs))

    def _run_loop(self) -> None:
        while not self._loop_stop.is_set():
            try:
                wait = self.tick()
            except EncoreError:
                return
            self._nudge.wait(IDLE_WAIT if wait is None else min(wait, IDLE_WAIT))
            self._nudge.clear()

    def stop_services(self) -> None:
        """Stop firing business services; housekeeping goes on until :meth:`shutdown`."""
        with self._lock:
            self._services_stopped = True
        for service in self.services.values():
            service.stop_requested.set()

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Stop firing jobs; return True when no job is still running.

        ``wait=True`` waits up to ``timeout`` seconds (None: no limit) for running jobs, then calls
        every service's ``on_tear_down`` (skipped while a job still runs). Safe to call twice.
        """
        with self._lock:
            executor, self._executor = self._executor, None
            loop, self._loop = self._loop, None
        self._loop_stop.set()
        self._nudge.set()
        for service in self.services.values():
            service.stop_requested.set()
        if loop is not None and loop is not threading.current_thread():
            loop.join()
        if executor is not None:
            executor.shutdown(wait=False)
            log.log(self._log_level, "scheduler stopped")
        with self._idle:
            self._stopping = True
            if wait:
                self._idle.wait_for(lambda: not self._active, timeout)
            busy = sorted(self._active)
        if busy:
            if wait:
                log.warning("scheduler: job(s) %s still running at shutdown", ", ".join(busy))
            return False
        with self._lock:
            opened, self._opened = self._opened, False
        if opened:
            for service in self.services.values():
                try:
                    service.on_tear_down()
                except Exception:
                    log.exception("service %s: error in on_tear_down", service.name)
        return True

    def _execute(self, job: ScheduledJob, *, claimed: bool = False) -> bool:
        """Run ``job`` once unless the leader check says no; never raises."""
        if not claimed:
            with self._idle:
                self._active.add(job.name)
        try:
            if not self._may_run(job):
                return False
            self._run(job)
            return True
        finally:
            with self._idle:
                self._active.discard(job.name)
                self._idle.notify_all()

    def _may_run(self, job: ScheduledJob) -> bool:
        if job.leader_only and self.leader is not None and not self._is_leader():
            log.debug("job %s skipped: this daemon is not the scheduler leader", job.name)
            return False
        with self._idle:
            return not (self._stopping or (job.item is not None and self._services_stopped))

    def _run(self, job: ScheduledJob) -> None:
        try:
            job.action()
        except Exception as exc:
            job.failures += 1
            self._report(job, exc)
        finally:
            job.runs += 1
            job.last_run_time = self.clock.now()

    def _is_leader(self) -> bool:
        assert self.leader is not None
        try:
            return bool(self.leader())
        except Exception:
            log.exception("leader check failed; skipping scheduled work")
            return False

    def _process_input(self, service: BusinessService) -> None:
        if not self._enabled(service.name):
            return
        service.message_id = service.session_id = None
        service.on_process_input()

    def _enabled(self, name: str) -> bool:
        in_file = self._enabled_in_file.get(name, True)
        if self.store is None:
            return in_file
        return self.store.item_overrides().get(name, in_file)

    def _report(self, job: ScheduledJob, exc: BaseException) -> None:
        stack = "".join(traceback.format_exception(exc))
        if job.item is not None:
            service = self.services[job.item]
            text = f"on_process_input failed: {type(exc).__name__}: {exc}"
            context: dict[str, Any] = {"config_name": job.item,
                                       "source_class": type(service).__qualname__,
                                       "source_method": "on_process_input"}
        else:
            text = f"housekeeping job {job.name!r} failed: {type(exc).__name__}: {exc}"
            context = {"config_name": None, "source_class": type(self).__name__,
                       "source_method": job.name}
        if self.events is None:
            log.error("%s\n%s", text, stack)
            return
        try:
            self.events.write("Error", text, stack=stack, **context)
        except Exception:
            log.exception("could not write an Error event for %s: %s", job.name, text)
            log.error("%s\n%s", text, stack)


def _thread_pool(name: str, workers: int) -> Executor:
    return ThreadPoolExecutor(workers, thread_name_prefix=name)


def _interval(seconds: float, now: datetime) -> IntervalTrigger:
    """Every ``seconds`` seconds, the first fire ``seconds`` after ``now``."""
    return IntervalTrigger(seconds=seconds, start_date=now + timedelta(seconds=seconds),
                           timezone=UTC)


def _cron(expr: str, now: datetime) -> BaseTrigger:
    return parse_schedule(expr)
