"""Operator actions and purge on SQLite and PostgreSQL, on messages that real workers
delivered (Echo completes; Flaky answers 503 and gives up or parks for a retry)."""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from engine.cli.operator import parse_duration
from engine.clock import VirtualClock, utcnow
from engine.delivery.worker import MessageWorker
from engine.errors import HttpStatusError, OperatorError
from engine.host import BusinessOperation
from engine.retry import ReplyCodeActions, RetryPolicy
from engine.settings import validate_settings
from engine.store import operator, queries
from engine.store.models import event_log, message_attempt, message_header
from engine.store.operator import PurgeCounts
from engine.store.sql import SqlStore
from tests.claiming import claim_one
from tests.unit.sample_ops import EchoOperation, StubOperation

ITEMS = ("Busy", "Echo", "Flaky", "Held", "Parked")  # no worker serves Busy or Held
PING = "tests.unit.sample_ops:Ping"
OLD = timedelta(days=60)  # the virtual clock starts this long before the real now


class Production:
    """Real workers for three items on one store and a virtual clock."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.clock = VirtualClock(start=utcnow() - OLD)
        self.workers = {
            "Echo": self._worker("Echo", EchoOperation, {}),
            # 503 once, failure_timeout 0: one attempt, then Error.
            "Flaky": self._worker("Flaky", StubOperation, {"failure_timeout": 0}),
            # 503, retry forever in requeue mode: parked in Queued with a next attempt time.
            "Parked": self._worker("Parked", StubOperation, {
                "failure_timeout": -1, "retry_interval": 60, "retry_mode": "requeue"}),
        }

    def _worker(self, name: str, cls: type[BusinessOperation],
                raw: dict[str, Any]) -> MessageWorker:
        settings = validate_settings(name, raw, cls.declared_settings())
        adapter = None
        if cls.adapter_class is not None:
            adapter = cls.adapter_class(settings, clock=self.clock)
            adapter.script = lambda call: HttpStatusError("503 busy", status_code=503,
                                                          retryable=True)
            adapter.start()
        host = cls(name, settings, events=self.store.events, adapter=adapter)
        return MessageWorker(host, store=self.store, clock=self.clock,
                             policy=RetryPolicy.from_settings(settings),
                             reply_codes=ReplyCodeActions.parse(settings["reply_code_actions"]),
                             requeue=settings["retry_mode"] == "requeue")

    def send(self, target: str = "Held", text: str = "hi") -> int:
        """Enqueue one message; by default for an item no worker here serves."""
        body_class = PING if target == "Echo" else None
        return self.store.enqueue(target=target, body_class=body_class,
                                  body=f'{{"text": "{text}", "count": 1}}', source="test",
                                  now=self.clock.now())

    def deliver(self, target: str = "Echo", text: str = "hi") -> int:
        """Send one message to ``target`` and let its worker deliver it once."""
        message_id = self.send(target, text)
        row = claim_one(self.store, target, owner="worker", now=self.clock.now(),
                                    lease_seconds=60)
        assert row is not None and row.id == message_id
        self.workers[target].deliver(row)
        return message_id

    def claim(self, target: str = "Busy") -> int:
        """Send one message to an item no worker here serves and leave it claimed by another
        daemon (status Delivered)."""
        message_id = self.send(target)
        row = claim_one(self.store, target, owner="daemon-B", now=self.clock.now(),
                                    lease_seconds=60)
        assert row is not None and row.id == message_id
        return message_id

    def status(self, message_id: int) -> str:
        row = self.store.get_message(message_id)
        return row.status if row else "gone"


@pytest.fixture
def prod(store: SqlStore) -> Production:
    return Production(store)


def events_of(store: SqlStore, message_id: int) -> list[tuple[str, str]]:
    flt = queries.EventFilter(message_id=message_id)
    return [(e["type"], e["text"]) for e in queries.events(store, flt)]


def count(store: SqlStore, table: Any, where: Any = None) -> int:
    query = select(func.count()).select_from(table)
    if where is not None:
        query = query.where(where)
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


# -- resend ------------------------------------------------------------------------------
def test_resend_queues_a_copy_in_the_same_session_and_the_copy_is_delivered(
        prod: Production) -> None:
    original = prod.deliver("Echo", "again")
    new_id = operator.resend(prod.store, original, now=prod.clock.now(), known_items=ITEMS)
    old, new = prod.store.get_message(original), prod.store.get_message(new_id)
    assert (new.status, new.kind, new.target, new.source) == (
        "Queued", "request", "Echo", f"resend:{original}")
    assert (new.session_id, new.body, new.body_class) == (old.session_id, old.body, PING)
    assert operator.resent_from(new.source) == original
    assert old.status == "Completed"
    assert ("Info", f"resent by an operator as message {new_id}") in events_of(prod.store,
                                                                                original)
    row = claim_one(prod.store, "Echo", owner="worker", now=prod.clock.now(), lease_seconds=60)
    prod.workers["Echo"].deliver(row)
    assert prod.status(new_id) == "Completed"
    response = prod.store.get_message(prod.store.get_message(new_id).corresponding_id)
    assert '"AGAIN"' in response.body and response.session_id == old.session_id


def test_resend_accepts_every_final_and_the_suspended_status(prod: Production) -> None:
    error = prod.deliver("Flaky")
    suspended, discarded = prod.send(), prod.send()
    operator.suspend(prod.store, suspended, now=prod.clock.now())
    operator.discard(prod.store, discarded, now=prod.clock.now())
    prod.store.finish(aborted := prod.send(), status="Aborted", error_text="x",
                      now=prod.clock.now())
    for original in (error, suspended, discarded, aborted):
        new_id = operator.resend(prod.store, original, now=prod.clock.now())
        assert prod.store.get_message(new_id).source == f"resend:{original}"
    assert [prod.status(i) for i in (error, suspended, discarded, aborted)] == [
        "Error", "Suspended", "Discarded", "Aborted"]


def test_resend_to_another_item_needs_an_item_of_the_production(prod: Production) -> None:
    original = prod.deliver("Flaky")
    new_id = operator.resend(prod.store, original, target="Parked", now=prod.clock.now(),
                             known_items=ITEMS)
    assert prod.store.get_message(new_id).target == "Parked"
    assert ("Info", f"resent by an operator as message {new_id} to Parked") in events_of(
        prod.store, original)
    before = count(prod.store, message_header)
    with pytest.raises(OperatorError,
                       match=r"'Nowhere': no such item .*Busy, Echo, Flaky, Held, Parked"):
        operator.resend(prod.store, original, target="Nowhere", now=prod.clock.now(),
                        known_items=ITEMS)
    assert count(prod.store, message_header) == before


def test_resend_refuses_unfinished_messages_responses_and_unknown_ids(
        prod: Production) -> None:
    queued, delivered = prod.send(), prod.claim()
    completed = prod.deliver()
    response = prod.store.get_message(completed).corresponding_id
    before = count(prod.store, message_header)
    with pytest.raises(OperatorError, match=rf"message {queued} is Queued; only Completed, "
                                            r"Error, Discarded, Aborted or Suspended"):
        operator.resend(prod.store, queued, now=prod.clock.now())
    with pytest.raises(OperatorError, match=rf"message {delivered} is Delivered: it is being "
                                            r"delivered by daemon daemon-B; try again"):
        operator.resend(prod.store, delivered, now=prod.clock.now())
    with pytest.raises(OperatorError, match=rf"message {response} is a response to request "
                                            rf"{completed}"):
        operator.resend(prod.store, response, now=prod.clock.now())
    with pytest.raises(OperatorError, match="message 999 does not exist"):
        operator.resend(prod.store, 999, now=prod.clock.now())
    assert count(prod.store, message_header) == before


# -- suspend -----------------------------------------------------------------------------
def test_suspend_takes_a_queued_message_out_of_its_queue(prod: Production) -> None:
    message_id = prod.send()
    operator.suspend(prod.store, message_id, now=prod.clock.now())
    row = prod.store.get_message(message_id)
    assert (row.status, row.retry_needed, row.time_completed) == (
        "Suspended", False, prod.clock.now())
    assert events_of(prod.store, message_id) == [("Info", "suspended by an operator")]
    assert claim_one(prod.store, "Held", owner="w", now=prod.clock.now(),
                                 lease_seconds=60) is None


def test_suspend_takes_a_message_parked_for_its_next_retry(prod: Production) -> None:
    message_id = prod.deliver("Parked")
    parked = prod.store.get_message(message_id)
    assert (parked.status, parked.retry_needed) == ("Queued", True)
    operator.suspend(prod.store, message_id, now=prod.clock.now())
    row = prod.store.get_message(message_id)
    assert (row.status, row.next_attempt_at, row.attempts) == ("Suspended", None, 1)
    later = prod.clock.now() + timedelta(hours=1)
    assert claim_one(prod.store, "Parked", owner="w", now=later, lease_seconds=60) is None


def test_suspend_refuses_delivered_final_and_suspended_messages(prod: Production) -> None:
    delivered, completed = prod.claim(), prod.deliver()
    with pytest.raises(OperatorError, match=rf"message {delivered} is Delivered: it is being "
                                            r"delivered by daemon daemon-B; try again when its "
                                            r"attempt ends \(only Queued messages can be "
                                            r"suspended\)"):
        operator.suspend(prod.store, delivered, now=prod.clock.now())
    with pytest.raises(OperatorError, match=rf"message {completed} is Completed; only Queued "
                                            r"messages can be suspended"):
        operator.suspend(prod.store, completed, now=prod.clock.now())
    operator.suspend(prod.store, queued := prod.send(), now=prod.clock.now())
    with pytest.raises(OperatorError, match=rf"message {queued} is Suspended; only Queued"):
        operator.suspend(prod.store, queued, now=prod.clock.now())
    row = prod.store.get_message(delivered)
    assert (row.status, row.claimed_by) == ("Delivered", "daemon-B")
    assert events_of(prod.store, delivered) == []


def test_suspend_never_takes_a_message_a_daemon_claims_at_the_same_time(
        prod: Production) -> None:
    ids = [prod.send() for _ in range(40)]
    claimed: list[int] = []
    suspended: list[int] = []
    refused: list[int] = []

    def claim() -> None:
        while (row := claim_one(prod.store, "Held", owner="daemon-B", now=utcnow(),
                                            lease_seconds=60)) is not None:
            claimed.append(row.id)

    def suspend() -> None:
        for message_id in reversed(ids):
            try:
                operator.suspend(prod.store, message_id, now=utcnow())
                suspended.append(message_id)
            except OperatorError:
                refused.append(message_id)

    threads = [threading.Thread(target=claim), threading.Thread(target=suspend)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed + suspended) == ids and not set(claimed) & set(suspended)
    assert sorted(refused) == sorted(claimed)
    assert all(prod.status(i) == "Delivered" for i in claimed)
    assert all(prod.status(i) == "Suspended" for i in suspended)


# -- discard -----------------------------------------------------------------------------
def test_discard_ends_queued_and_suspended_messages(prod: Production) -> None:
    parked, suspended = prod.deliver("Parked"), prod.send()
    operator.suspend(prod.store, suspended, now=prod.clock.now())
    prod.clock.advance(5)
    for message_id in (parked, suspended):
        operator.discard(prod.store, message_id, now=prod.clock.now())
        row = prod.store.get_message(message_id)
        assert (row.status, row.retry_needed, row.next_attempt_at, row.time_completed) == (
            "Discarded", False, None, prod.clock.now())
        assert events_of(prod.store, message_id)[-1] == ("Info", "discarded by an operator")
    assert claim_one(prod.store, "Parked", owner="w", now=prod.clock.now() + OLD,
                                 lease_seconds=60) is None


def test_discard_refuses_delivered_and_final_messages(prod: Production) -> None:
    delivered, failed = prod.claim(), prod.deliver("Flaky")
    with pytest.raises(OperatorError, match=rf"message {delivered} is Delivered: .* daemon-B; "
                                            r".*only Queued or Suspended messages can be "
                                            r"discarded"):
        operator.discard(prod.store, delivered, now=prod.clock.now())
    with pytest.raises(OperatorError, match=rf"message {failed} is Error; only Queued or "
                                            r"Suspended messages can be discarded"):
        operator.discard(prod.store, failed, now=prod.clock.now())
    assert (prod.status(delivered), prod.status(failed)) == ("Delivered", "Error")


def test_suspended_messages_are_listed_with_their_last_error(prod: Production) -> None:
    parked, queued = prod.deliver("Parked"), prod.send()
    for message_id in (parked, queued):
        operator.suspend(prod.store, message_id, now=prod.clock.now())
    rows = operator.suspended_messages(prod.store)
    assert [(r["id"], r["target"], r["attempts"]) for r in rows] == [
        (parked, "Parked", 1), (queued, "Held", 0)]
    assert rows[0]["suspended_at"] == prod.clock.now()
    assert [r["id"] for r in operator.suspended_messages(prod.store, item="Held")] == [queued]


# -- items -------------------------------------------------------------------------------
def test_disable_and_enable_write_the_item_state_and_an_event(prod: Production) -> None:
    now = prod.clock.now()
    operator.disable_item(prod.store, "Echo", reason="maintenance", known_items=ITEMS, now=now)
    assert prod.store.item_overrides() == {"Echo": False}
    operator.enable_item(prod.store, "Echo", known_items=ITEMS, now=now)
    assert prod.store.item_overrides() == {"Echo": True}
    texts = [(e["type"], e["text"]) for e in
             queries.events(prod.store, queries.EventFilter(item="Echo"))]
    assert texts == [("Info", "item disabled by an operator: maintenance"),
                     ("Info", "item enabled by an operator")]
    with pytest.raises(OperatorError,
                       match=r"no item named 'Echoo'.*Busy, Echo, Flaky, Held, Parked"):
        operator.disable_item(prod.store, "Echoo", reason=None, known_items=ITEMS, now=now)
    assert prod.store.item_overrides() == {"Echo": True}


# -- purge -------------------------------------------------------------------------------
def test_purge_removes_old_finished_messages_with_their_responses_attempts_and_events(
        prod: Production) -> None:
    store = prod.store
    old = [prod.deliver("Echo"), prod.deliver("Flaky"), prod.send()]
    operator.discard(store, old[2], now=prod.clock.now())
    old_response = store.get_message(old[0]).corresponding_id
    kept = {"queued": prod.send(), "parked": prod.deliver("Parked"), "delivered": prod.claim(),
            "suspended": prod.send()}
    operator.suspend(store, kept["suspended"], now=prod.clock.now())
    prod.clock.advance((OLD - timedelta(days=1)).total_seconds())
    kept["recent"] = prod.deliver("Echo")
    now = utcnow()
    store.events.write("Info", "old, of no message", now=now - timedelta(days=31))
    store.events.write("Info", "recent, of no message", now=now - timedelta(days=1))
    kept_ids = [*kept.values(), store.get_message(kept["recent"]).corresponding_id]
    kept_events = {i: events_of(store, i) for i in kept_ids}
    assert events_of(store, old[1])  # the give-up of the Flaky message

    expected = PurgeCounts(requests=3, responses=1, attempts=2,
                           events=sum(len(events_of(store, i)) for i in old) + 1)
    assert operator.purge(store, timedelta(days=30), now, dry_run=True) == expected
    assert count(store, message_header, message_header.c.id.in_(old)) == 3
    assert operator.purge(store, timedelta(days=30), now) == expected

    assert [prod.status(i) for i in (*old, old_response)] == ["gone"] * 4
    assert count(store, message_attempt, message_attempt.c.message_id.in_(old)) == 0
    assert count(store, event_log, event_log.c.message_id.in_(old)) == 0
    assert [prod.status(i) for i in kept_ids] == [
        "Queued", "Queued", "Delivered", "Suspended", "Completed", "Completed"]
    assert {i: events_of(store, i) for i in kept_ids} == kept_events
    assert [e["text"] for e in queries.events(store, queries.EventFilter())
            if e["message_id"] is None] == ["recent, of no message"]
    assert operator.purge(store, timedelta(days=30), now) == PurgeCounts()


def test_purge_works_through_many_messages_in_batches(prod: Production,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operator, "PURGE_BATCH", 2)
    ids = [prod.deliver("Echo", f"m{i}") for i in range(5)]
    for i in range(8):
        prod.store.events.write("Info", f"orphan {i}", now=utcnow() - OLD)
    prod.store.events.write("Info", "of a message long gone", message_id=9999,
                            now=utcnow() - OLD)
    counts = operator.purge(prod.store, timedelta(days=30), utcnow())
    assert counts == PurgeCounts(requests=5, responses=5, attempts=5, events=9)
    assert counts.messages == 10
    assert [prod.status(i) for i in ids] == ["gone"] * 5
    assert count(prod.store, message_header) == 0 and count(prod.store, event_log) == 0


@pytest.mark.parametrize(("text", "expected"), [
    ("30d", timedelta(days=30)),  # days
    ("12h", timedelta(hours=12)),  # hours
    ("90m", timedelta(minutes=90)),  # minutes
])
def test_purge_ages_are_days_hours_or_minutes(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["30", "1.5d", "-3d", "3w", ""])
def test_other_purge_ages_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="30d, 12h or 90m"):
        parse_duration(text)
