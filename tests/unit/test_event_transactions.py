"""Events of a change of state are written in the transaction of that change: a change the
fencing refuses leaves no event behind, and an event is never on record without its change."""
from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from engine.attempt import AttemptObserver, AttemptReport
from engine.clock import VirtualClock
from engine.delivery.worker import MessageWorker, Result
from engine.errors import ClaimLost, ResponseTimeout
from engine.settings import validate_settings
from engine.store import queries
from engine.store.models import message_header
from engine.store.sql import SqlStore
from engine.testing import StubAdapter
from tests.claiming import claim_one
from tests.unit.sample_ops import StubOperation

SETTINGS = {"response_timeout": 7, "retry_interval": 10, "failure_timeout": 30}


class TakenOver(AttemptObserver):
    """After attempt ``at`` has ended, another daemon takes the message's claim over."""

    def __init__(self, store: SqlStore, at: int) -> None:
        self.store, self.at = store, at

    def after_attempt(self, row: Any, report: AttemptReport) -> None:
        if report.number == self.at:
            with self.store.engine.begin() as conn:
                conn.execute(update(message_header).where(message_header.c.id == row.id)
                             .values(claim_token=message_header.c.claim_token + 1,
                                     claimed_by="another-daemon"))


def _worker(store: SqlStore, clock: VirtualClock, settings: dict[str, Any],
            script: Any) -> MessageWorker:
    validated = validate_settings("Item", settings, StubOperation.declared_settings())
    adapter = StubAdapter(validated, clock=clock)
    adapter.script = script
    adapter.start()
    host = StubOperation("Item", validated, events=store.events, adapter=adapter)
    return MessageWorker.from_settings(host, validated, store=store, clock=clock)


def _deliver(store: SqlStore, worker: MessageWorker, clock: VirtualClock) -> tuple[int, Any]:
    mid = store.enqueue(target="Item", body_class=None, body='{"x": 1}', now=clock.now())
    row = claim_one(store, "Item", owner="me", now=clock.now(), lease_seconds=3600)
    assert row is not None and row.id == mid
    try:
        return mid, worker.deliver(row)
    except ClaimLost as exc:
        return mid, exc


def _events(store: SqlStore, mid: int) -> list[tuple[str, str]]:
    return [(e["type"], e["source_method"])
            for e in queries.events(store, queries.EventFilter(message_id=mid))]


@pytest.mark.parametrize("settings,failures,at,change", [
    # attempt 1 fails: its Error event goes with the retry it schedules
    (SETTINGS, 1, 1, "on_first_failure"),
    # the last attempt fails: the give-up's Error event goes with the Error status
    ({**SETTINGS, "failure_timeout": 0}, 1, 1, "on_give_up"),
    # a success after failures: its Info event goes with the completion
    (SETTINGS, 1, 2, "on_complete"),
])
def test_a_change_refused_by_fencing_leaves_no_event(
        store: SqlStore, settings: dict[str, Any], failures: int, at: int, change: str) -> None:
    clock = VirtualClock()
    script = [ResponseTimeout("no answer")] * failures + ["ok"]
    worker = _worker(store, clock, settings, script)
    worker.observers = (TakenOver(store, at),)
    mid, ended = _deliver(store, worker, clock)
    assert isinstance(ended, ClaimLost)
    assert change not in [method for _, method in _events(store, mid)]
    row = store.get_message(mid)
    assert row.claimed_by == "another-daemon" and row.status == "Delivered"


def test_events_and_their_changes_are_on_record_together(store: SqlStore) -> None:
    clock = VirtualClock()
    worker = _worker(store, clock, SETTINGS, [ResponseTimeout("no answer"), "ok"])
    mid, ended = _deliver(store, worker, clock)
    assert ended is Result.COMPLETED
    assert _events(store, mid) == [("Error", "on_first_failure"), ("Info", "on_complete")]
    assert worker.event_log.take() == ()  # every event went with its change


def test_events_written_outside_a_delivery_are_written_at_once(store: SqlStore) -> None:
    store.events.write("Info", "hello", config_name="Item")
    assert [e["text"] for e in queries.events(store, queries.EventFilter())] == ["hello"]


class LogsAndLooks(StubOperation):
    """Writes an event of its own, then counts the message's events on record already."""

    store: SqlStore
    seen: list[int]

    def on_message(self, request: Any) -> Any:
        self.log_info("calling the service")
        LogsAndLooks.seen.append(len(queries.events(
            LogsAndLooks.store, queries.EventFilter(message_id=self.message_id))))
        return super().on_message(request)


def test_an_operations_own_events_are_written_as_it_writes_them(store: SqlStore) -> None:
    clock = VirtualClock()
    validated = validate_settings("Item", SETTINGS, LogsAndLooks.declared_settings())
    adapter = StubAdapter(validated, clock=clock)
    adapter.script = [ResponseTimeout("no answer"), "ok"]
    adapter.start()
    host = LogsAndLooks("Item", validated, events=store.events, adapter=adapter)
    worker = MessageWorker.from_settings(host, validated, store=store, clock=clock)
    LogsAndLooks.store, LogsAndLooks.seen = store, []
    mid, ended = _deliver(store, worker, clock)
    assert ended is Result.COMPLETED
    # attempt 1: its own event; attempt 2: both of its own and the first failure's
    assert LogsAndLooks.seen == [1, 3]
