"""The worker's retry behaviour on a virtual clock, through the real daemon driven by its
``tick()`` (:class:`engine.testing.VirtualDaemon`): exact timelines, events, flags."""
from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from engine.attempt import AttemptObserver, AttemptReport
from engine.clock import VirtualClock
from engine.delivery.worker import Result, idempotency_key
from engine.errors import CRASH_TEXT, AttemptHeld, HttpStatusError, RemoteFault, ResponseTimeout
from engine.host import BusinessOperation
from engine.settings import validate_settings
from engine.store import queries
from engine.store.sql import SqlStore
from engine.store.transition import AttemptEnd, Requeue, Transition
from engine.testing import (
    ServerBehaviour,
    SimulatedOperation,
    SimulatedServerAdapter,
    StubAdapter,
    VirtualDaemon,
)
from tests.claiming import claim_one
from tests.unit.sample_ops import RetryTwiceOperation, StubOperation

SEED = {"response_timeout": 7, "retry_interval": 10, "failure_timeout": 30}


class Harness:
    """One item of the real daemon on a virtual clock (:class:`VirtualDaemon`) against an
    in-memory store; ``deliver_next`` ticks it until it has delivered a message."""

    def __init__(self, store: SqlStore, cls: type[BusinessOperation], settings: dict[str, Any],
                 adapter_factory: Any = None) -> None:
        self.store = store
        self.settings = validate_settings("Item", settings, cls.declared_settings())
        adapter = None
        if adapter_factory is not None:
            def adapter(clock: VirtualClock) -> Any:
                return adapter_factory(self.settings, clock)
        self.daemon = VirtualDaemon.for_item("Item", cls, settings, adapter=adapter,
                                             store=store)
        self.clock = self.daemon.clock
        self.host = self.daemon.hosts["Item"]
        (self.worker,) = self.daemon.daemon.runners["Item"].workers

    def send(self, body: str = '{"text": "hi"}') -> int:
        return self.store.enqueue(target="Item", body_class=None, body=body, now=self.clock.now())

    def deliver_next(self) -> Result:
        """Tick the daemon (at the clock's time) until it has delivered one message; what
        that delivery came to."""
        delivered = len(self.daemon.deliveries)
        for _ in range(3):  # a tick may only commit or take back claims first
            self.daemon.tick()
            if len(self.daemon.deliveries) > delivered:
                return self.daemon.deliveries[delivered][1]
        raise AssertionError("nothing to deliver")

    def offsets(self, message_id: int) -> list[tuple[float, float, str]]:
        return [((a.started_at - self.clock.start).total_seconds(),
                 (a.ended_at - self.clock.start).total_seconds(), a.outcome)
                for a in self.store.attempts(message_id)]

    def events(self, type_: str | None = None) -> list[str]:
        """The texts of the item's events (not the daemon's own record of its life)."""
        return [e["text"] for e in queries.events(self.store, queries.EventFilter(type=type_))
                if e["source_class"] != "Daemon"]


def simulated(delay: float, servers: int = 1, **kw: Any) -> Any:
    def factory(settings: dict[str, Any], clock: VirtualClock) -> SimulatedServerAdapter:
        return SimulatedServerAdapter(settings, behaviour=ServerBehaviour(delay=delay, **kw),
                                      servers=servers, clock=clock)
    return factory


def stub(script: Any) -> Any:
    def factory(settings: dict[str, Any], clock: VirtualClock) -> StubAdapter:
        adapter = StubAdapter(settings, clock=clock)
        adapter.script = script
        return adapter
    return factory


def test_the_seed_timeline_holds_exactly(store: SqlStore) -> None:
    h = Harness(store, SimulatedOperation, SEED, simulated(8))
    mid = h.send()
    assert h.deliver_next() is Result.ERROR
    assert h.offsets(mid) == [(0, 7, "timeout"), (10, 17, "timeout"), (20, 27, "timeout"),
                              (30, 37, "timeout")]
    row = store.get_message(mid)
    assert row.status == "Error" and row.is_error and row.attempts == 4
    assert (row.time_completed - h.clock.start).total_seconds() == 37
    errors = h.events("Error")
    assert len(errors) == 2
    assert "attempt 1 failed" in errors[0]
    assert "FailureTimeout of 30 seconds exceeded" in errors[1] and "ResponseTimeout" in errors[1]
    assert h.host.adapter.total_requests == 4


def test_the_retry_state_is_persisted_while_waiting(store: SqlStore) -> None:
    h = Harness(store, SimulatedOperation, SEED, simulated(8))
    mid = h.send()
    seen: list[tuple[bool, float | None]] = []
    real_sleep = h.clock.sleep

    def spying_sleep(seconds: float, stop: Any = None) -> bool:
        row = store.get_message(mid)
        seen.append((row.retry_needed, (row.next_attempt_at - h.clock.start).total_seconds()))
        return real_sleep(seconds, stop)

    h.clock.sleep = spying_sleep  # type: ignore[method-assign]
    h.deliver_next()
    assert seen == [(True, 10), (True, 20), (True, 30)]


def test_seed_003_fails_over_three_servers_and_gives_up_at_40(store: SqlStore) -> None:
    settings = {"response_timeout": 10, "retry_interval": 0, "failure_timeout": 35}
    h = Harness(store, SimulatedOperation, settings, simulated(11, servers=3))
    mid = h.send()
    h.deliver_next()
    assert [o[0] for o in h.offsets(mid)] == [0, 10, 20, 30]
    assert [a.server for a in store.attempts(mid)] == ["A", "B", "C", "A"]
    assert (store.get_message(mid).time_completed - h.clock.start).total_seconds() == 40


def test_a_non_idempotent_item_never_resends_an_outcome_unknown_request(store: SqlStore) -> None:
    settings = {"response_timeout": 10, "retry_interval": 0, "failure_timeout": 35,
                "idempotent": False}
    h = Harness(store, SimulatedOperation, settings, simulated(11, servers=3))
    mid = h.send()
    assert h.deliver_next() is Result.ERROR
    assert h.offsets(mid) == [(0, 10, "timeout")]
    assert "may have been processed" in h.events("Error")[-1]


def test_on_unknown_outcome_suspend_leaves_the_message_for_an_operator(store: SqlStore) -> None:
    settings = {**SEED, "idempotent": False, "on_unknown_outcome": "suspend"}
    h = Harness(store, SimulatedOperation, settings, simulated(8))
    mid = h.send()
    assert h.deliver_next() is Result.SUSPENDED
    assert store.get_message(mid).status == "Suspended"


def test_success_after_retries_writes_one_info_event(store: SqlStore) -> None:
    h = Harness(store, RetryTwiceOperation, {"retry_interval": 2, "failure_timeout": 60})
    mid = h.send()
    assert h.deliver_next() is Result.COMPLETED
    assert [o[0] for o in h.offsets(mid)] == [0, 2, 4]
    assert h.events("Info") == ["completed on attempt 3 after 2 failed attempts"]
    assert len(h.events("Error")) == 1
    row = store.get_message(mid)
    response = store.get_message(row.corresponding_id)
    assert response.body == '{"attempt":3}' and not row.retry_needed


def test_failure_timeout_zero_means_a_single_attempt(store: SqlStore) -> None:
    h = Harness(store, SimulatedOperation, {**SEED, "failure_timeout": 0}, simulated(8))
    mid = h.send()
    h.deliver_next()
    assert len(h.offsets(mid)) == 1


def test_a_soap_fault_is_not_retried_under_the_default_reply_code_actions(
        store: SqlStore) -> None:
    h = Harness(store, StubOperation, SEED, stub([RemoteFault("Client: bad", fault_code="Client")]))
    mid = h.send()
    assert h.deliver_next() is Result.ERROR
    assert len(store.attempts(mid)) == 1
    assert "not retryable" in h.events("Error")[-1]


@pytest.mark.parametrize(("actions", "status", "events"), [
    # C: an error treated as completed
    ("E#404=C", "Completed", {}),
    # S: suspend at once
    ("E#404=S", "Suspended", {"Warning": 1}),
    # R: retry until the failure timeout, then Error (not Completed, unlike Ensemble)
    ("E#404=R", "Error", {"Error": 2}),
    # W only rules are evaluated first and add a warning; the default E=F then fails
    ("E*not found=W", "Error", {"Warning": 1, "Error": 2}),
])
def test_reply_code_actions_decide_what_an_answered_error_does(
        store: SqlStore, actions: str, status: str, events: dict[str, int]) -> None:
    error = HttpStatusError("HTTP 404 not found", code="404", status_code=404)
    h = Harness(store, StubOperation, {**SEED, "reply_code_actions": actions},
                stub(lambda call: error))
    mid = h.send()
    h.deliver_next()
    assert store.get_message(mid).status == status
    for type_, count in events.items():
        assert len(h.events(type_)) == count, h.events()


def test_reply_code_action_d_disables_the_item_and_keeps_the_message_first(
        store: SqlStore) -> None:
    error = HttpStatusError("HTTP 503", code="503", status_code=503, retryable=False)
    h = Harness(store, StubOperation, {**SEED, "reply_code_actions": "E#503=D"},
                stub(lambda call: error))
    first, _second = h.send(), h.send()
    assert h.deliver_next() is Result.DISABLED
    assert store.item_overrides() == {"Item": False}
    row = store.get_message(first)
    assert row.status == "Queued"
    # while the item is off nothing is claimed; switched on, the message comes first
    assert claim_one(store, "Item", owner="t", now=h.clock.now(), lease_seconds=10) is None
    store.set_item_enabled("Item", True, reason=None, now=h.clock.now())
    nxt = claim_one(store, "Item", owner="t", now=h.clock.now(), lease_seconds=10)
    assert nxt.id == first


def test_requeue_mode_parks_the_message_until_its_next_attempt(store: SqlStore) -> None:
    h = Harness(store, SimulatedOperation, {**SEED, "retry_mode": "requeue"}, simulated(8))
    mid = h.send()
    assert h.deliver_next() is Result.PARKED
    row = store.get_message(mid)
    assert row.status == "Queued" and row.retry_needed
    assert (row.next_attempt_at - h.clock.start).total_seconds() == 10
    assert claim_one(store, "Item", owner="t", now=h.clock.now(), lease_seconds=9) is None
    while (row := store.get_message(mid)).status == "Queued":
        h.clock.advance_to((row.next_attempt_at - h.clock.start).total_seconds())
        h.deliver_next()
    assert store.get_message(mid).status == "Error"
    assert [o[0] for o in h.offsets(mid)] == [0, 10, 20, 30]


def test_trace_writes_one_trace_event_per_attempt(store: SqlStore) -> None:
    h = Harness(store, SimulatedOperation, {**SEED, "trace": True}, simulated(8))
    h.send()
    h.deliver_next()
    assert len(h.events("Trace")) == 4


def test_an_attempt_in_flight_at_a_crash_is_resent_only_when_idempotent(store: SqlStore) -> None:
    for idempotent, expected in ((True, "Completed"), (False, "Suspended")):
        h = Harness(store, StubOperation, {**SEED, "idempotent": idempotent}, stub(["ok"]))
        mid = h.send()
        row = claim_one(store, "Item", owner="dead", now=h.clock.now(), lease_seconds=1)
        store.begin_attempt(mid, 1, started_at=h.clock.now())  # then the daemon died
        h.clock.advance(5)
        assert h.deliver_next().value == expected
        attempts = store.attempts(mid)
        assert attempts[0].error_text.startswith("outcome unknown")
        assert len(attempts) == (2 if idempotent else 1)
        assert row is not None
        h.daemon.stop()  # the next harness is another daemon: this one lets go of the item


def test_an_attempt_in_flight_at_a_crash_suspends_a_not_idempotent_item_whatever_it_says(
        store: SqlStore) -> None:
    # on_unknown_outcome = "error" ends a live outcome-unknown failure in Error; an attempt
    # its daemon left in flight is suspended all the same, for an operator
    settings = {**SEED, "idempotent": False, "on_unknown_outcome": "error"}
    h = Harness(store, StubOperation, settings, stub(["ok"]))
    mid = h.send()
    claim_one(store, "Item", owner="dead", now=h.clock.now(), lease_seconds=1)
    store.begin_attempt(mid, 1, started_at=h.clock.now())  # then the daemon died
    h.clock.advance(5)
    assert h.deliver_next() is Result.SUSPENDED
    text = (f"{CRASH_TEXT}; the request may have been processed, so it is not re-sent (the "
            "item is not idempotent); resend or discard it")
    message = store.get_message(mid)
    assert message is not None
    assert (message.status, message.error_text) == ("Suspended", text)
    assert h.events("Warning") == [text]


def test_failure_timeout_counts_from_the_original_first_attempt_after_a_restart(
        store: SqlStore) -> None:
    h = Harness(store, SimulatedOperation, SEED, simulated(8))
    mid = h.send()
    row = claim_one(store, "Item", owner="dead", now=h.clock.now(), lease_seconds=1)
    aid = store.begin_attempt(mid, 1, started_at=h.clock.now())
    h.clock.advance(7)
    store.apply(Transition(mid, None, Requeue(h.clock.start + timedelta(seconds=10), retry=True),
                           AttemptEnd(aid, h.clock.now(), outcome="timeout")))
    h.clock.advance_to(25)  # the restart comes late: attempts resume at 25 and 35
    h.deliver_next()
    assert [o[0] for o in h.offsets(mid)] == [0, 25]
    assert row is not None
    assert "FailureTimeout of 30 seconds exceeded" in h.events("Error")[-1]
    assert len(h.events("Error")) == 1  # the first failure was logged by the dead daemon


class HookOperation(SimulatedOperation):
    def on_failure_timeout(self, request: Any) -> Any:
        return {"fallback": True}


def test_on_failure_timeout_may_supply_a_response(store: SqlStore) -> None:
    h = Harness(store, HookOperation, SEED, simulated(8))
    mid = h.send()
    assert h.deliver_next() is Result.COMPLETED
    assert store.get_message(store.get_message(mid).corresponding_id).body == '{"fallback":true}'


def test_the_deadline_given_to_the_adapter_is_the_attempt_start_plus_response_timeout(
        store: SqlStore) -> None:
    h = Harness(store, StubOperation, SEED, stub([ResponseTimeout("t"), "ok"]))
    h.send()
    h.deliver_next()
    calls = h.host.adapter.calls
    assert [c.attempt_deadline - c.started for c in calls] == [7, 7]
    assert calls[0].idempotency_key == calls[1].idempotency_key != ""


def test_the_idempotency_key_is_the_uuid5_of_the_message_and_its_creation_time(
        store: SqlStore) -> None:
    """The key must not change between versions: a message re-sent after an upgrade carries
    the key its first attempt carried."""
    for _ in range(20):
        mid = store.enqueue(target="Item", body_class=None, body="{}")
        row = store.get_message(mid)
        name = f"encore:{mid}:{row.time_created.isoformat()}"
        assert idempotency_key(row) == str(uuid.uuid5(uuid.NAMESPACE_OID, name))


class HoldFirst(AttemptObserver):
    """Holds the first attempt it sees for 5 s, then lets every attempt through with a
    header; records what it was told."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock, self.held, self.reports = clock, 0, []

    def before_attempt(self, row: Any, number: int) -> dict[str, str] | None:
        if not self.held:
            self.held += 1
            raise AttemptHeld("breaker open", until=self.clock.now() + timedelta(seconds=5))
        return {"traceparent": f"00-{row.id:032x}-{number:016x}-01"}

    def after_attempt(self, row: Any, report: AttemptReport) -> None:
        self.reports.append((report.number, report.outcome))


@pytest.mark.parametrize("begun", [False, True])
def test_an_observer_holds_a_message_unsent_and_its_headers_reach_the_adapter(
        store: SqlStore, begun: bool) -> None:
    h = Harness(store, StubOperation, SEED, stub(lambda call: "ok"))
    observer = HoldFirst(h.clock)
    h.worker.observers = (observer,)
    mid = h.send()
    (claimed,) = store.claim("Item", owner="t", now=h.clock.now(), lease_seconds=60,
                             begin=begun)
    assert h.worker.deliver(claimed.row, claimed.begun) is Result.HELD
    row = store.get_message(mid)
    assert (row.status, row.attempts, row.first_attempt_at) == ("Queued", 0, None)
    assert store.attempts(mid) == []  # an attempt begun with the claim is taken back
    assert claim_one(store, "Item", owner="t", now=h.clock.now(), lease_seconds=60) is None
    h.clock.advance(5)
    assert h.deliver_next() is Result.COMPLETED
    (call,) = h.host.adapter.calls
    assert call.headers["traceparent"] == f"00-{mid:032x}-{1:016x}-01"
    assert observer.reports == [(1, "ok")]
    assert [a.attempt for a in store.attempts(mid)] == [1]
