"""A transition — an attempt's end, what follows it and its events — is written in one
transaction under one guard, or not at all; and no thread-local channel carries part of it."""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from engine.clock import utcnow
from engine.errors import ClaimLost, StoreError
from engine.store import queries
from engine.store.connector import Database
from engine.store.eventlog import Event, SqlEventLog, event
from engine.store.sql import SqlStore
from engine.store.statements import postgres, sqlite
from engine.store.transition import (
    AttemptEnd,
    Complete,
    Finish,
    Next,
    Requeue,
    RetryAt,
    Transition,
)
from tests.claiming import claim_one


def _claimed(store: SqlStore) -> tuple[int, int, int]:
    """A claimed message, its claim's token and its open attempt 1."""
    mid = store.enqueue(target="T", body_class=None, body="{}", now=utcnow())
    row = claim_one(store, "T", owner="me", now=utcnow(), lease_seconds=600)
    assert row is not None and row.id == mid
    aid = store.begin_attempt(mid, 1, started_at=utcnow(), token=row.claim_token)
    return mid, row.claim_token, aid


def _next_steps() -> list[Next]:
    now = utcnow()
    return [Finish("Error", "gave up", now), Requeue(now + timedelta(seconds=5), retry=True),
            RetryAt(now + timedelta(seconds=5)), Complete(now, None, '{"ok": true}')]


def _events(store: SqlStore, mid: int) -> list[str]:
    return [e["text"] for e in queries.events(store, queries.EventFilter(message_id=mid))]


def _report(mid: int, text: str) -> Event:
    return event("Error", text, config_name="T", message_id=mid, source_method="test",
                 echo=False)


def _unchanged(store: SqlStore, mid: int, token: int) -> None:
    """The message still claimed as it was, its attempt open, no event about it."""
    row = store.get_message(mid)
    assert row is not None
    assert (row.status, row.claim_token, row.retry_needed, row.corresponding_id) == (
        "Delivered", token, False, None)
    (attempt,) = store.attempts(mid)
    assert attempt.ended_at is None and attempt.outcome is None
    assert _events(store, mid) == []


def test_the_store_has_no_thread_local_channel_for_a_change(store: SqlStore) -> None:
    for name in ("until_next_change", "held", "discard_held", "insert_held"):
        assert not hasattr(SqlEventLog, name), name
    for owner, name in ((SqlStore, "drop_deferred"), (SqlStore, "end_attempt"),
                        (SqlStore, "schedule_retry"), (Database, "deferred")):
        assert not hasattr(owner, name), name
    for part in (store, store.db, store.events, store.db.hot):
        assert not [k for k, v in vars(part).items() if isinstance(v, threading.local)], part


@pytest.mark.parametrize("then", _next_steps(), ids=lambda t: type(t).__name__)
def test_an_attempt_end_its_events_and_its_next_step_are_written_together(
        store: SqlStore, then: Next) -> None:
    mid, token, aid = _claimed(store)
    ended = AttemptEnd(aid, utcnow(), "http://s/", "timeout", error_text="no answer")
    store.apply(Transition(mid, token, then, ended, (_report(mid, "one"), _report(mid, "two"))))
    row = store.get_message(mid)
    assert row is not None
    expected = {Finish: "Error", Requeue: "Queued", RetryAt: "Delivered",
                Complete: "Completed"}[type(then)]
    assert row.status == expected
    (attempt,) = store.attempts(mid)
    assert (attempt.outcome, attempt.error_text, attempt.server) == (
        "timeout", "no answer", "http://s/")
    assert _events(store, mid) == ["one", "two"]


@pytest.mark.parametrize("then", _next_steps(), ids=lambda t: type(t).__name__)
def test_a_transition_that_fails_midway_writes_nothing(store: SqlStore, then: Next) -> None:
    mid, token, aid = _claimed(store)
    ended = AttemptEnd(aid, utcnow(), "http://s/", "timeout", error_text="no answer")
    refused: Any = Event(utcnow(), "Error", None)  # type: ignore[arg-type]  # NOT NULL text
    with pytest.raises(StoreError):
        store.apply(Transition(mid, token, then, ended, (_report(mid, "first"), refused)))
    _unchanged(store, mid, token)


@pytest.mark.parametrize("then", _next_steps(), ids=lambda t: type(t).__name__)
def test_a_transition_whose_claim_is_lost_writes_nothing(store: SqlStore, then: Next) -> None:
    mid, token, aid = _claimed(store)
    ended = AttemptEnd(aid, utcnow(), outcome="ok" if isinstance(then, Complete) else "error")
    with pytest.raises(ClaimLost):
        store.apply(Transition(mid, token + 1, then, ended, (_report(mid, "lost"),)))
    _unchanged(store, mid, token)


def test_completed_is_written_by_one_statement_per_dialect() -> None:
    for dialect in (sqlite, postgres):
        writers = [name for name in dialect.__all__
                   if "status = 'Completed'" in str(getattr(dialect, name))]
        assert writers == ["COMPLETE"], dialect.__name__
