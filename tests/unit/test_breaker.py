"""The circuit breaker's state machine on a virtual clock: opening after N consecutive failed
attempts, holding, one probe across daemons, closing and reopening, a lost probe, and what
it costs while closed (docs/guards.md)."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event

from engine.attempt import AttemptReport
from engine.clock import VirtualClock
from engine.delivery.breaker import BREAKER_REFRESH, BreakerSettings, CircuitBreaker
from engine.delivery.guards import GuardSettings
from engine.errors import AttemptHeld, ConfigurationError, ResponseTimeout
from engine.host import BusinessOperation
from engine.observe.metrics import Metrics
from engine.settings import validate_settings
from engine.store import queries
from engine.store.rows import MessageRow
from engine.store.sql import SqlStore
from engine.testing import ServerBehaviour
from engine.tools.simulate import simulate

ITEM = "Item"
THRESHOLD = 3
OPEN_SECONDS = 30.0
PROBE_SECONDS = 35.0  # OPEN_SECONDS + a response timeout of 5 s


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


def make_breaker(store: SqlStore, clock: VirtualClock, owner: str = "daemon-A",
                 transitions: list[tuple[str, float, float | None]] | None = None
                 ) -> CircuitBreaker:
    def tell(kind: str, when: Any, attempt: int, until: Any) -> None:
        if transitions is not None:
            transitions.append((kind, (when - clock.start).total_seconds(),
                                None if until is None else (until - clock.start).total_seconds()))
    settings = BreakerSettings(threshold=THRESHOLD, open_seconds=OPEN_SECONDS,
                               probe_seconds=PROBE_SECONDS)
    return CircuitBreaker(ITEM, settings, store=store, clock=clock, owner=owner,
                          events=store.events, listener=tell)


def message(store: SqlStore, clock: VirtualClock) -> MessageRow:
    mid = store.enqueue(target=ITEM, body_class=None, body="{}", now=clock.now())
    row = store.get_message(mid)
    assert row is not None
    return row


def fail(breaker: CircuitBreaker, row: MessageRow, number: int = 1) -> None:
    breaker.after_attempt(row, AttemptReport(number=number, outcome="timeout", seconds=1.0,
                                             error=ResponseTimeout("no answer")))


def succeed(breaker: CircuitBreaker, row: MessageRow, number: int = 1) -> None:
    breaker.after_attempt(row, AttemptReport(number=number, outcome="ok", seconds=0.1))


def events(store: SqlStore, type_: str) -> list[str]:
    return [e["text"] for e in queries.events(store, queries.EventFilter(type=type_, item=ITEM))]


def open_breaker(store: SqlStore, clock: VirtualClock, breaker: CircuitBreaker) -> None:
    for _ in range(THRESHOLD):
        fail(breaker, message(store, clock))
    assert breaker.current().state == "open"


def test_threshold_consecutive_failures_open_the_breaker_with_one_warning(
        store: SqlStore, clock: VirtualClock) -> None:
    breaker = make_breaker(store, clock)
    for _ in range(THRESHOLD - 1):
        fail(breaker, message(store, clock))
    assert breaker.current().state == "closed" and breaker.allows_claims()
    fail(breaker, message(store, clock))
    row = store.breakers.get(ITEM)
    assert row is not None and row.state == "open" and row.failures == THRESHOLD
    assert row.open_until == clock.now() + timedelta(seconds=OPEN_SECONDS)
    assert not breaker.allows_claims()
    warnings = events(store, "Warning")
    assert len(warnings) == 1 and "after 3 consecutive failed attempts" in warnings[0]
    assert "ResponseTimeout: no answer" in warnings[0]


def test_a_success_sets_the_count_back_to_zero(store: SqlStore, clock: VirtualClock) -> None:
    breaker = make_breaker(store, clock)
    for _ in range(3):
        for _ in range(THRESHOLD - 1):
            fail(breaker, message(store, clock))
        succeed(breaker, message(store, clock))
    row = store.breakers.get(ITEM)
    assert row is not None and row.state == "closed" and row.failures == 0
    assert events(store, "Warning") == []


def test_failures_on_two_daemons_add_up(store: SqlStore, clock: VirtualClock) -> None:
    a, b = make_breaker(store, clock, "daemon-A"), make_breaker(store, clock, "daemon-B")
    fail(a, message(store, clock))
    fail(b, message(store, clock))
    fail(a, message(store, clock))
    assert not a.allows_claims()
    b.invalidate()  # what the announcement of the opening does on daemon B
    assert not b.allows_claims()
    assert len(events(store, "Warning")) == 1


def test_while_open_every_attempt_is_held_until_the_open_period_ends(
        store: SqlStore, clock: VirtualClock) -> None:
    breaker = make_breaker(store, clock)
    open_breaker(store, clock, breaker)
    opened = clock.now()
    clock.advance(OPEN_SECONDS - 0.001)
    for _ in range(3):
        with pytest.raises(AttemptHeld) as held:
            breaker.before_attempt(message(store, clock), 2)
        assert held.value.until == opened + timedelta(seconds=OPEN_SECONDS)
    assert not breaker.allows_claims()


def test_failures_of_attempts_in_flight_when_it_opened_do_not_count(
        store: SqlStore, clock: VirtualClock) -> None:
    breaker = make_breaker(store, clock)
    open_breaker(store, clock, breaker)
    fail(breaker, message(store, clock))
    succeed(breaker, message(store, clock))  # an in-flight success does not close it either
    row = store.breakers.get(ITEM)
    assert row is not None and row.state == "open" and row.failures == THRESHOLD
    assert len(events(store, "Warning")) == 1


def test_after_the_open_period_exactly_one_attempt_on_one_daemon_probes(
        store: SqlStore, clock: VirtualClock) -> None:
    a, b = make_breaker(store, clock, "daemon-A"), make_breaker(store, clock, "daemon-B")
    open_breaker(store, clock, a)
    clock.advance(OPEN_SECONDS)
    assert a.allows_claims() and b.allows_claims()  # the dispatchers claim, for the probe
    probe = message(store, clock)
    assert a.before_attempt(probe, 1) is None
    for breaker in (a, b, b):  # every other attempt waits for the probe, due at once
        with pytest.raises(AttemptHeld) as held:
            breaker.before_attempt(message(store, clock), 1)
        assert held.value.until is None
    assert not a.allows_claims() and not b.allows_claims()
    row = store.breakers.get(ITEM)
    assert row is not None and row.state == "half_open"
    assert row.probe_owner is not None and row.probe_owner.startswith("daemon-A:")


def test_a_successful_probe_closes_it_with_one_info_event(
        store: SqlStore, clock: VirtualClock) -> None:
    a, b = make_breaker(store, clock, "daemon-A"), make_breaker(store, clock, "daemon-B")
    open_breaker(store, clock, a)
    clock.advance(OPEN_SECONDS)
    probe = message(store, clock)
    a.before_attempt(probe, 4)
    clock.advance(0.5)
    succeed(a, probe, 4)
    assert a.current().state == "closed" and a.allows_claims()
    assert b.before_attempt(message(store, clock), 1) is None  # B reads it: not closed before
    row = store.breakers.get(ITEM)
    assert row is not None and row.failures == 0 and row.probe_owner is None
    infos = events(store, "Info")
    assert len(infos) == 1 and "closed" in infos[0] and f"message {probe.id}" in infos[0]
    assert len(events(store, "Warning")) == 1


def test_a_failed_probe_opens_it_again_without_another_warning(
        store: SqlStore, clock: VirtualClock) -> None:
    transitions: list[tuple[str, float, float | None]] = []
    breaker = make_breaker(store, clock, transitions=transitions)
    open_breaker(store, clock, breaker)
    clock.advance(OPEN_SECONDS)
    probe = message(store, clock)
    breaker.before_attempt(probe, 2)
    clock.advance(1)
    fail(breaker, probe, 2)
    with pytest.raises(AttemptHeld) as held:
        breaker.before_attempt(message(store, clock), 1)
    assert held.value.until == clock.now() + timedelta(seconds=OPEN_SECONDS)
    assert [t[0] for t in transitions] == ["open", "half_open", "open", "hold"]
    assert transitions[2] == ("open", 31.0, 61.0)
    assert len(events(store, "Warning")) == 1 and events(store, "Info") == []
    clock.advance(OPEN_SECONDS)
    assert breaker.before_attempt(message(store, clock), 1) is None  # the next probe


def test_a_lost_probe_lets_another_probe_after_its_time(
        store: SqlStore, clock: VirtualClock) -> None:
    a, b = make_breaker(store, clock, "daemon-A"), make_breaker(store, clock, "daemon-B")
    open_breaker(store, clock, a)
    clock.advance(OPEN_SECONDS)
    lost = message(store, clock)
    a.before_attempt(lost, 1)  # daemon A dies with its probe in flight
    clock.advance(PROBE_SECONDS - 0.001)
    with pytest.raises(AttemptHeld):
        b.before_attempt(message(store, clock), 1)
    clock.advance(0.001)
    second = message(store, clock)
    assert b.before_attempt(second, 1) is None
    succeed(a, lost)  # the lost probe's late answer decides nothing
    assert store.breakers.get(ITEM).state == "half_open"  # type: ignore[union-attr]
    succeed(b, second)
    assert store.breakers.get(ITEM).state == "closed"  # type: ignore[union-attr]
    assert len(events(store, "Info")) == 1


def test_a_closed_breaker_costs_no_statement_per_successful_attempt(
        store: SqlStore, clock: VirtualClock) -> None:
    breaker = make_breaker(store, clock)
    rows = [message(store, clock) for _ in range(50)]
    with count_statements(store) as statements:
        for row in rows:
            assert breaker.before_attempt(row, 1) is None
            succeed(breaker, row)
            assert breaker.allows_claims()
    assert statements == []
    clock.advance(BREAKER_REFRESH)
    with count_statements(store) as statements:
        for row in rows:
            breaker.before_attempt(row, 1)
            succeed(breaker, row)
    assert len(statements) == 1 and statements[0].lstrip().upper().startswith("SELECT")


def test_a_success_after_failures_writes_once(store: SqlStore, clock: VirtualClock) -> None:
    breaker = make_breaker(store, clock)
    fail(breaker, message(store, clock))
    with count_statements(store) as statements:
        for _ in range(5):
            succeed(breaker, message(store, clock))
    assert [s.split()[0].upper() for s in statements if "item_breaker" in s] == ["UPDATE"]


class count_statements:  # used as a context manager
    """Records the SQL statements run on ``store`` inside the ``with`` block."""

    def __init__(self, store: SqlStore) -> None:
        self.engine = store.engine
        self.statements: list[str] = []

    def _record(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            self.statements.append(statement)

    def __enter__(self) -> list[str]:
        event.listen(self.engine, "before_cursor_execute", self._record)
        return self.statements

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._record)


# -- settings ------------------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "says"), [
    # a negative threshold
    ({"breaker_threshold": -1}, "'breaker_threshold': -1 is out of range"),
    # an open period of 0 s would never hold anything
    ({"breaker_open_seconds": 0}, "'breaker_open_seconds': 0 is out of range"),
    # NaN and infinity are refused like any non-finite number
    ({"breaker_open_seconds": float("nan")}, "'breaker_open_seconds': nan is not a finite number"),
    ({"breaker_open_seconds": float("inf")}, "'breaker_open_seconds': inf is not a finite number"),
    # a whole number of failed attempts
    ({"breaker_threshold": 2.5}, "'breaker_threshold': expected integer"),
])
def test_wrong_breaker_settings_are_refused_naming_item_and_key(
        settings: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        validate_settings("Payments", settings, BusinessOperation.declared_settings())
    assert str(refused.value).startswith("item 'Payments', setting") and says in str(refused.value)


def test_the_breaker_is_off_by_default() -> None:
    clean = validate_settings("Payments", {}, BusinessOperation.declared_settings())
    assert clean["breaker_threshold"] == 0 and clean["breaker_open_seconds"] == 30.0
    assert BreakerSettings.from_settings(GuardSettings.from_validated(clean)) is None
    on = BreakerSettings.from_settings(
        GuardSettings.from_validated({**clean, "breaker_threshold": 5}), response_timeout=7)
    assert on == BreakerSettings(threshold=5, open_seconds=30.0, probe_seconds=37.0)


# -- the worker and the breaker: encore simulate ------------------------------------------------

def timeline(**settings: Any) -> list[tuple[float, str, int | None]]:
    behaviour = settings.pop("behaviour")
    result = simulate(settings, behaviour)
    return [(e.t, e.event, e.attempt) for e in result.timeline]


def test_a_retry_due_while_open_waits_for_the_probe_and_failure_timeout_keeps_running() -> None:
    events_ = timeline(response_timeout=7, retry_interval=10, failure_timeout=60,
                       breaker_threshold=2, breaker_open_seconds=30,
                       behaviour=ServerBehaviour(delay=8))
    starts = [(t, a) for t, e, a in events_ if e == "attempt_start"]
    assert starts == [(0, 1), (10, 2), (47, 3), (84, 4)]  # 47 = 17 + 30; 84 = 54 + 30
    assert [(t, e) for t, e, _ in events_ if e.startswith("breaker_")] == [
        (17, "breaker_open"), (20, "breaker_hold"), (47, "breaker_half_open"),
        (54, "breaker_open"), (57, "breaker_hold"), (84, "breaker_half_open"),
        (91, "breaker_open")]
    assert events_[-2][:2] == (91, "give_up")  # 91 − 0 ≥ 60: the hold did not reset it


def test_a_successful_probe_completes_the_message_and_closes_the_breaker() -> None:
    events_ = timeline(response_timeout=7, retry_interval=10, failure_timeout=100,
                       breaker_threshold=2, breaker_open_seconds=30,
                       behaviour=ServerBehaviour(delay=1, fail_first=3, status=503))
    assert [(t, e) for t, e, _ in events_ if e.startswith(("breaker_", "success"))] == [
        (11, "breaker_open"), (20, "breaker_hold"), (41, "breaker_half_open"),
        (42, "breaker_open"), (51, "breaker_hold"), (72, "breaker_half_open"),
        (73, "breaker_close"), (73, "success")]


def test_below_the_threshold_the_timeline_is_unchanged() -> None:
    seed = {"response_timeout": 7, "retry_interval": 10, "failure_timeout": 30}
    with_breaker = timeline(**seed, breaker_threshold=5, behaviour=ServerBehaviour(delay=8))
    assert with_breaker == timeline(**seed, behaviour=ServerBehaviour(delay=8))


def test_the_breaker_state_is_a_prometheus_gauge(store: SqlStore, clock: VirtualClock) -> None:
    metrics = Metrics()
    breaker = CircuitBreaker(ITEM, BreakerSettings(threshold=1, open_seconds=30,
                                                   probe_seconds=35),
                             store=store, clock=clock, owner="A", metrics=metrics)
    assert 'encore_breaker_open{item="Item"} 0' in metrics.render()
    fail(breaker, message(store, clock))
    assert 'encore_breaker_open{item="Item"} 1' in metrics.render()
    metrics.rate_limited(ITEM, 0.25)
    assert 'encore_rate_limit_wait_seconds_total{item="Item"} 0.25' in metrics.render()
