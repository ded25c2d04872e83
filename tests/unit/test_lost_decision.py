"""A decision the database refused (found by the fault campaign, bench/chaos.py, with the
SQLite disk full): a failed attempt's end is written with what follows it — the retry it
schedules, the give-up, the suspension — in one transaction, never before it. When that
transaction fails, the attempt stays open, so the next delivery treats it as *outcome
unknown*: a non-idempotent request is not sent again, and attempt 1's first-failure event
is written exactly once (docs/retries.md rule 6, docs/architecture.md).

Before the fix the attempt's end was committed on its own: the message went back to its
queue looking like a decided retry, and the next delivery sent a non-idempotent request a
second time, with no first-failure event on record. The refusal here is SQLite's own (a
trigger that aborts the decision's UPDATE), as a full disk refuses it."""
from __future__ import annotations

from sqlalchemy import text

from engine.delivery.worker import Result
from engine.store.sql import SqlStore
from engine.testing import SimulatedOperation
from tests.unit.test_worker import SEED, Harness, simulated


def refuse(store: SqlStore, column: str, when: str) -> None:
    """Make SQLite abort every UPDATE of ``column`` of a message ``when`` holds."""
    with store.engine.begin() as conn:
        conn.execute(text(
            f"CREATE TRIGGER refuse BEFORE UPDATE OF {column} ON message_header "
            f"WHEN {when} BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"))


def first_failures(store: SqlStore, mid: int) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM event_log WHERE message_id = :m AND type = 'Error' "
            "AND source_method = 'on_first_failure'"), {"m": mid}).scalar_one())


def deliver_after_the_refusal(h: Harness) -> Result:
    """The refused delivery, then the next one once the database takes writes again."""
    try:
        h.deliver_next()
    except AssertionError:
        pass  # the refused delivery is not counted as one
    with h.store.engine.begin() as conn:
        conn.execute(text("DROP TRIGGER refuse"))
    h.clock.advance(60)  # past the lease of the refused delivery's claim
    return h.deliver_next()


def test_a_lost_give_up_does_not_send_a_non_idempotent_request_again(
        store: SqlStore) -> None:
    settings = {"response_timeout": 10, "retry_interval": 0, "failure_timeout": 35,
                "idempotent": False}
    h = Harness(store, SimulatedOperation, settings, simulated(11))
    mid = h.send()
    refuse(store, "status", "NEW.status = 'Error'")
    result = deliver_after_the_refusal(h)
    attempts = store.attempts(mid)
    assert len(attempts) == 1, attempts  # sent once, never again
    assert result is Result.SUSPENDED
    attempts = store.attempts(mid)
    assert len(attempts) == 1, attempts  # sent once, never again
    assert attempts[0].error_text.startswith("outcome unknown")
    assert store.get_message(mid).status == "Suspended"
    assert first_failures(store, mid) == 1


def test_a_lost_retry_schedule_writes_the_first_failure_once(store: SqlStore) -> None:
    # An idempotent message: the schedule of its retry is refused; the next delivery
    # recovers attempt 1 as outcome unknown, writes its first failure once and retries.
    h = Harness(store, SimulatedOperation, SEED, simulated(8))
    mid = h.send()
    refuse(store, "retry_needed", "NEW.retry_needed")
    deliver_after_the_refusal(h)
    assert first_failures(store, mid) == 1
    assert store.attempts(mid)[0].error_text.startswith("outcome unknown")
