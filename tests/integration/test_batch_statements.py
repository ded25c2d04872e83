"""A batch of intakes and a batch of successes, recorded by the hot path as one transaction
each (on SQLite, by statements that take the whole batch at once): every row as the
one-by-one statements would leave it, a lost claim left alone, waiters told."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import text

from engine.clock import utcnow
from engine.store.hotpath import Completion, Intake
from engine.store.sql import SqlStore
from engine.store.transition import AttemptEnd, Requeue, Transition

CLAIM = {"owner": "d", "lease_seconds": 30, "fifo": False, "begin": True, "enabled": True}


def _claim(store: SqlStore, target: str, limit: int) -> list[Any]:
    _, claimed = store.complete_and_claim([], now=utcnow(), target=target, limit=limit, **CLAIM)
    assert len(claimed) == limit
    return sorted(claimed, key=lambda c: c.row.id)


def test_a_batch_of_successes_is_recorded_whole_and_a_lost_claim_is_left_alone(
        store: SqlStore) -> None:
    ids = [store.enqueue(target="A", body_class=None, body=f'{{"n": {n}}}') for n in range(4)]
    waited = store.accept(target="A", body_class=None, body='{"n": 4}', waited=True).id
    ids.append(waited)
    claimed = _claim(store, "A", 5)
    assert [c.row.id for c in claimed] == ids
    started = utcnow() - timedelta(seconds=2)
    ended = started + timedelta(milliseconds=5)
    lost, answered = ids[1], ids[3]

    def success(c: Any) -> Completion:
        token = c.row.claim_token + (1 if c.row.id == lost else 0)  # another's claim now
        body = '{"answer": 3}' if c.row.id == answered else None
        return Completion(c.row.id, token, c.begun, started, ended, f"http://s/{c.row.id}",
                          None, body)

    kept_before = store.completions.kept(waited)
    done = store.complete_many([success(c) for c in claimed], now=ended)

    assert done == [i for i in ids if i != lost]  # in order, the lost claim left out
    for mid in done:
        row = store.get_message(mid)
        assert row is not None
        assert (row.status, row.claimed_by, row.lease_expires_at, row.retry_needed,
                row.is_error) == ("Completed", None, None, False, False), mid
        assert row.first_attempt_at == started and row.time_completed == ended, mid
        (attempt,) = store.attempts(mid)
        assert (attempt.outcome, attempt.server, attempt.started_at, attempt.ended_at) == (
            "ok", f"http://s/{mid}", started, ended), mid
    response = store.get_message(answered).corresponding_id  # type: ignore[union-attr]
    assert store.get_message(response).body == '{"answer": 3}'  # type: ignore[union-attr]
    assert all(store.get_message(m).corresponding_id is None  # type: ignore[union-attr]
               for m in done if m != answered)
    row = store.get_message(lost)
    assert row is not None and (row.status, row.claimed_by) == ("Delivered", "d")
    assert [a.outcome for a in store.attempts(lost)] == [None]  # still open
    assert kept_before is None and store.completions.kept(waited) is not None  # its waiter's


def test_successes_of_messages_past_their_first_attempt_keep_its_start(store: SqlStore) -> None:
    ids = [store.enqueue(target="A", body_class=None, body="{}") for _ in range(2)]
    first = _claim(store, "A", 2)
    t0 = utcnow() - timedelta(seconds=10)
    for c in first:  # attempt 1 fails; the message goes back to its queue at once
        store.apply(Transition(c.row.id, None, Requeue(t0, retry=True),
                               AttemptEnd(c.begun, t0, outcome="error", error_text="boom")))
    starts = [store.get_message(mid).first_attempt_at for mid in ids]  # type: ignore[union-attr]
    assert None not in starts
    again = _claim(store, "A", 2)
    now = utcnow()
    begun = [store.begin_attempt(c.row.id, 2, started_at=now) for c in again]  # as a worker
    done = store.complete_many([Completion(c.row.id, c.row.claim_token, aid, now, now, None,
                                           None, None) for c, aid in zip(again, begun)],
                               now=now)
    assert done == ids
    assert [[a.outcome for a in store.attempts(mid)] for mid in ids] == [["error", "ok"]] * 2
    for mid, start in zip(ids, starts):
        row = store.get_message(mid)
        assert row is not None and row.status == "Completed"
        assert row.first_attempt_at == start != now


def test_a_batch_of_intakes_gets_ids_in_order_each_in_its_own_session_or_the_given_one(
        store: SqlStore) -> None:
    now = utcnow()
    before = store.enqueue(target="A", body_class=None, body="{}")
    intakes = [
        Intake("A", None, '{"text": "caf\\u00e9 \\"quoted\\" \\\\ back"}', "cli", None, now,
               None, None),
        Intake("B", "x.Order", '{"n": 2}', "api:shop", 77, now, None, "00-trace-01", True),
        Intake("A", None, "[]", None, None, now, None, None),
    ]
    accepted = store.db.hot.accept_many(intakes)
    assert [a.id for a in accepted] == [before + 1, before + 2, before + 3]
    assert [a.session_id for a in accepted] == [before + 1, 77, before + 3]
    assert all(a.created for a in accepted)
    rows = [store.get_message(a.id) for a in accepted]
    assert [(r.target, r.body_class, r.body, r.source, r.session_id, r.status, r.kind,
             r.waited, r.time_created) for r in rows if r is not None] == [
        ("A", None, intakes[0].body, "cli", before + 1, "Queued", "request", False, now),
        ("B", "x.Order", '{"n": 2}', "api:shop", 77, "Queued", "request", True, now),
        ("A", None, "[]", None, before + 3, "Queued", "request", False, now)]
    assert store.get_message(accepted[1].id).trace_context == "00-trace-01"  # type: ignore[union-attr]
    with store.engine.connect() as conn:  # whose keys they would be: an API token's or ''
        callers = conn.execute(text("SELECT idempotency_caller FROM message_header "
                                    "WHERE id > :id ORDER BY id"), {"id": before}).scalars()
        assert list(callers) == ["", "api:shop", ""]


def test_a_batch_with_a_nul_character_is_written_whole_on_sqlite(tmp_path: Any) -> None:
    """SQLite's JSON functions end a string at a NUL: such a batch goes the one-by-one way
    (PostgreSQL's text holds no NUL at all, so this is SQLite's alone)."""
    store = SqlStore(f"sqlite:///{tmp_path / 'nul.db'}")
    store.upgrade()
    try:
        now = utcnow()
        accepted = store.db.hot.accept_many([
            Intake("A", None, "{}", "svc\x00tail", None, now, None, None),
            Intake("A", None, "{}", "plain", None, now, None, None)])
        assert [store.get_message(a.id).source for a in accepted] == [  # type: ignore[union-attr]
            "svc\x00tail", "plain"]
        claimed = _claim(store, "A", 2)
        done = store.complete_many([Completion(
            c.row.id, c.row.claim_token, c.begun, now, now, f"http://s\x00/{n}", None, None)
            for n, c in enumerate(claimed)], now=now)
        assert done == [a.id for a in accepted]
        assert [store.attempts(a.id)[0].server for a in accepted] == [
            "http://s\x00/0", "http://s\x00/1"]
    finally:
        store.dispose()
