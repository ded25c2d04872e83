"""The production scheduler: exact fire times on a virtual clock (interval and cron), errors
that never stop it, housekeeping, enabled state, and one real-time run."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.clock import VirtualClock
from engine.config.production import ProductionConfig, parse_production
from engine.errors import EncoreError
from engine.runtime.scheduler import ProductionScheduler
from engine.service import BusinessService, parse_schedule
from engine.store import queries
from engine.store.sql import SqlStore
from tests.waiting import wait_until

REAL_INTERVAL = 0.2  # seconds between fires in the real-time test
REAL_WINDOW = 2.0  # seconds the real-time test waits for two fires (generous)


class RecordingService(BusinessService):
    """Records the clock time of every call; fails on the calls listed in ``fail_on``
    (1-based)."""

    fail_on: set[int] = set()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fired: list[datetime] = []
        self.inits = 0
        self.tear_downs = 0

    def on_init(self) -> None:
        self.inits += 1

    def on_tear_down(self) -> None:
        self.tear_downs += 1

    def on_process_input(self) -> None:
        self.fired.append(self.clock.now())
        if len(self.fired) in self.fail_on:
            raise RuntimeError(f"input source unavailable on call {len(self.fired)}")


class FailingOnFirstCall(RecordingService):
    fail_on = {1}


class SlowService(BusinessService):
    """Takes longer than its interval; records how many calls overlap."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.active = 0
        self.most_active = 0
        self.calls = 0

    def on_process_input(self) -> None:
        with self.lock:
            self.active += 1
            self.calls += 1
            self.most_active = max(self.most_active, self.active)
        time.sleep(REAL_INTERVAL * 2)
        with self.lock:
            self.active -= 1


class BlockingService(RecordingService):
    """Blocks in on_process_input until ``release`` is set."""

    release = threading.Event()
    entered = threading.Event()

    def on_process_input(self) -> None:
        super().on_process_input()
        self.entered.set()
        self.release.wait(REAL_WINDOW * 5)


def production(cls: str = "RecordingService", settings: str = "call_interval = 10",
               enabled: bool = True) -> ProductionConfig:
    return parse_production(f"""
[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"

[[items]]
name = "Poller"
class = "tests.unit.test_scheduler:{cls}"
enabled = {str(enabled).lower()}
[items.settings]
{settings}
""", env={})


def run_for(scheduler: ProductionScheduler, clock: VirtualClock, seconds: float,
            step: float = 1.0) -> None:
    """Advance ``clock`` in ``step``-second increments, running what is due at each."""
    end = clock.monotonic() + seconds
    while clock.monotonic() < end:
        clock.advance(step)
        scheduler.run_due(clock.now())


def offsets(service: Any, clock: VirtualClock) -> list[float]:
    return [(t - clock.start).total_seconds() for t in service.fired]


# -- on a virtual clock ----------------------------------------------------------------------
def test_a_call_interval_of_10_fires_at_exactly_10_20_and_30(store: SqlStore) -> None:
    clock = VirtualClock()
    scheduler = ProductionScheduler(production(), store=store, clock=clock)
    service = scheduler.services["Poller"]

    run_for(scheduler, clock, 35, step=0.5)

    assert offsets(service, clock) == [10.0, 20.0, 30.0]
    assert scheduler.job("service:Poller").next_run_time == clock.start + timedelta(seconds=40)


def test_nothing_fires_before_the_first_interval(store: SqlStore) -> None:
    clock = VirtualClock()
    scheduler = ProductionScheduler(production(), store=store, clock=clock)

    assert scheduler.run_due(clock.now()) == 0
    clock.advance(9.999)
    assert scheduler.due_jobs(clock.now()) == []
    assert scheduler.seconds_until_next(clock.now()) == pytest.approx(0.001)


def test_missed_fire_times_coalesce_into_one_run(store: SqlStore) -> None:
    clock = VirtualClock()
    scheduler = ProductionScheduler(production(), store=store, clock=clock)
    service = scheduler.services["Poller"]

    clock.advance(35)  # 10, 20 and 30 were missed
    assert [j.name for j in scheduler.due_jobs(clock.now())] == ["service:Poller"]
    assert scheduler.run_due(clock.now()) == 1
    run_for(scheduler, clock, 10)

    assert offsets(service, clock) == [35.0, 40.0]


def test_a_cron_schedule_every_5_minutes_fires_on_the_fives(store: SqlStore) -> None:
    clock = VirtualClock(start=datetime(2024, 3, 4, 10, 2, 30, tzinfo=UTC))
    scheduler = ProductionScheduler(production(settings='schedule = "*/5 * * * *"'),
                                    store=store, clock=clock)
    service = scheduler.services["Poller"]

    run_for(scheduler, clock, 14 * 60, step=15)  # to 10:16:30

    assert [t.strftime("%H:%M:%S") for t in service.fired] == ["10:05:00", "10:10:00",
                                                               "10:15:00"]


def test_a_cron_schedule_ignores_call_interval(store: SqlStore) -> None:
    clock = VirtualClock(start=datetime(2024, 3, 4, 10, 0, 1, tzinfo=UTC))
    scheduler = ProductionScheduler(
        production(settings='schedule = "0 * * * *"\ncall_interval = 1'), store=store,
        clock=clock)

    run_for(scheduler, clock, 3600, step=60)

    assert [t.strftime("%H:%M") for t in scheduler.services["Poller"].fired] == ["11:00"]


def test_cron_day_of_week_1_means_monday() -> None:
    saturday = datetime(2000, 1, 1, tzinfo=UTC)

    fire = parse_schedule("0 9 * * 1").get_next_fire_time(None, saturday)

    assert fire == datetime(2000, 1, 3, 9, 0, tzinfo=UTC)
    assert fire.strftime("%A") == "Monday"


def test_an_exception_in_on_process_input_writes_an_error_event_and_the_next_fire_happens(
        store: SqlStore) -> None:
    clock = VirtualClock()
    scheduler = ProductionScheduler(production("FailingOnFirstCall"), store=store, clock=clock)
    service = scheduler.services["Poller"]

    run_for(scheduler, clock, 25)

    assert offsets(service, clock) == [10.0, 20.0]
    errors = queries.events(store, queries.EventFilter(type="Error"))
    assert len(errors) == 1
    event = errors[0]
    assert event["config_name"] == "Poller"
    assert event["source_method"] == "on_process_input"
    assert event["source_class"] == "FailingOnFirstCall"
    assert "input source unavailable on call 1" in event["text"]
    assert "Traceback" in event["stack"] and "RuntimeError" in event["stack"]
    job = scheduler.job("service:Poller")
    assert (job.runs, job.failures) == (2, 1)


def test_housekeeping_runs_every_n_seconds_and_survives_its_own_errors(
        store: SqlStore) -> None:
    clock = VirtualClock()
    scheduler = ProductionScheduler(store=store, clock=clock)
    calls: list[float] = []

    def purge() -> None:
        calls.append(clock.monotonic())
        if len(calls) == 1:
            raise OSError("database is locked")

    scheduler.add_housekeeping("purge", 30, purge)
    run_for(scheduler, clock, 95)

    assert calls == [30.0, 60.0, 90.0]
    errors = queries.events(store, queries.EventFilter(type="Error"))
    assert [(e["config_name"], e["source_method"]) for e in errors] == [
        (None, "housekeeping:purge")]
    assert "database is locked" in errors[0]["text"]


def test_on_init_runs_before_the_first_fire_and_on_tear_down_at_shutdown(
        store: SqlStore) -> None:
    clock = VirtualClock()
    scheduler = ProductionScheduler(production(), store=store, clock=clock)
    service = scheduler.services["Poller"]
    assert service.inits == 0

    run_for(scheduler, clock, 10)
    assert (service.inits, len(service.fired)) == (1, 1)
    scheduler.shutdown()
    scheduler.shutdown()  # twice is harmless

    assert service.tear_downs == 1
    assert service.stop_requested.is_set()


def test_an_item_disabled_in_the_file_never_fires_unless_an_operator_enables_it(
        store: SqlStore) -> None:
    clock = VirtualClock()
    scheduler = ProductionScheduler(production(enabled=False), store=store, clock=clock)
    service = scheduler.services["Poller"]

    run_for(scheduler, clock, 25)
    assert service.fired == []

    store.set_item_enabled("Poller", True, reason="operator", now=clock.now())
    run_for(scheduler, clock, 10)
    assert offsets(service, clock) == [30.0]


def test_an_operator_can_disable_a_service(store: SqlStore) -> None:
    clock = VirtualClock()
    scheduler = ProductionScheduler(production(), store=store, clock=clock)
    store.set_item_enabled("Poller", False, reason="maintenance", now=clock.now())

    run_for(scheduler, clock, 25)

    assert scheduler.services["Poller"].fired == []


def test_a_service_job_is_skipped_when_the_leader_check_says_no(store: SqlStore) -> None:
    clock = VirtualClock()
    leader = {"now": False}
    scheduler = ProductionScheduler(production(), store=store, clock=clock,
                                    leader=lambda: leader["now"])
    beats: list[float] = []
    scheduler.add_housekeeping("heartbeat", 10, lambda: beats.append(clock.monotonic()))

    run_for(scheduler, clock, 10)
    leader["now"] = True
    run_for(scheduler, clock, 10)

    assert offsets(scheduler.services["Poller"], clock) == [20.0]
    assert beats == [10.0, 20.0]  # housekeeping runs on every daemon by default


def test_housekeeping_needs_a_positive_interval_and_a_unique_name() -> None:
    scheduler = ProductionScheduler(clock=VirtualClock())
    scheduler.add_housekeeping("heartbeat", 10, lambda: None)

    with pytest.raises(ValueError, match="seconds must be > 0"):
        scheduler.add_housekeeping("purge", 0, lambda: None)
    with pytest.raises(ValueError, match="already scheduled"):
        scheduler.add_housekeeping("heartbeat", 5, lambda: None)


def test_services_are_built_for_service_items_only(store: SqlStore) -> None:
    scheduler = ProductionScheduler(production(), store=store, clock=VirtualClock())

    assert list(scheduler.services) == ["Poller"]
    assert [j.name for j in scheduler.jobs] == ["service:Poller"]
    assert scheduler.services["Poller"].store is store


# -- in real time ----------------------------------------------------------------------------
@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[SqlStore]:
    s = SqlStore(f"sqlite:///{tmp_path / 'encore.db'}")
    s.upgrade()
    yield s
    s.dispose()


def test_in_real_time_a_short_interval_fires_repeatedly_and_stops_on_shutdown(
        file_store: SqlStore) -> None:
    scheduler = ProductionScheduler(production(settings=f"call_interval = {REAL_INTERVAL}"),
                                    store=file_store)
    service = scheduler.services["Poller"]
    scheduler.start()
    try:
        wait_until(lambda: len(service.fired) >= 2, REAL_WINDOW, "two fires")
        assert len(service.fired) >= 2
        with pytest.raises(EncoreError, match="real time"):
            scheduler.run_due(datetime.now(UTC))
    finally:
        scheduler.shutdown(wait=True)

    fired = len(service.fired)
    time.sleep(REAL_INTERVAL * 3)
    assert len(service.fired) == fired
    assert service.fired == sorted(service.fired)
    assert (service.inits, service.tear_downs) == (1, 1)
    assert not scheduler.running


def test_in_real_time_a_slow_job_never_overlaps_itself(file_store: SqlStore) -> None:
    scheduler = ProductionScheduler(
        production("SlowService", settings=f"call_interval = {REAL_INTERVAL / 4}"),
        store=file_store)
    service = scheduler.services["Poller"]
    beats: list[float] = []
    scheduler.add_housekeeping("heartbeat", REAL_INTERVAL / 4, lambda: beats.append(1))
    scheduler.start()
    try:
        wait_until(lambda: service.calls >= 2, REAL_WINDOW, "two calls")
    finally:
        scheduler.shutdown(wait=True)

    assert service.calls >= 2
    assert service.most_active == 1
    assert len(beats) >= 2  # the slow service did not hold up housekeeping


def test_shutdown_with_a_timeout_leaves_a_stuck_job_and_tears_down_once_it_ends(
        file_store: SqlStore) -> None:
    BlockingService.release.clear()
    BlockingService.entered.clear()
    scheduler = ProductionScheduler(
        production("BlockingService", settings=f"call_interval = {REAL_INTERVAL}"),
        store=file_store)
    service = scheduler.services["Poller"]
    scheduler.start()
    try:
        assert BlockingService.entered.wait(REAL_WINDOW)
        assert scheduler.shutdown(wait=True, timeout=REAL_INTERVAL) is False
        assert service.stop_requested.is_set()
        assert service.tear_downs == 0  # never while on_process_input still runs
    finally:
        BlockingService.release.set()

    assert scheduler.shutdown(wait=True, timeout=REAL_WINDOW) is True
    assert (len(service.fired), service.tear_downs) == (1, 1)
