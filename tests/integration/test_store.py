"""SqlStore on SQLite and PostgreSQL: queue order, claims, leases, attempts, outcomes."""
from __future__ import annotations

import threading
from datetime import timedelta

from engine.clock import utcnow
from engine.store.sql import SqlStore
from engine.store.transition import AttemptEnd, Requeue, Transition
from tests.claiming import claim_one


def enqueue(store: SqlStore, n: int, target: str = "A") -> list[int]:
    return [store.enqueue(target=target, body_class=None, body=f'{{"n": {i}}}')
            for i in range(n)]


def test_a_new_message_is_queued_and_starts_its_own_session(store: SqlStore) -> None:
    (mid,) = enqueue(store, 1)
    row = store.get_message(mid)
    assert row is not None
    assert (row.status, row.session_id, row.kind, row.attempts) == ("Queued", mid, "request", 0)
    assert row.time_created.tzinfo is not None


def test_claims_take_messages_in_order_and_only_from_their_own_queue(store: SqlStore) -> None:
    ids = enqueue(store, 3)
    enqueue(store, 2, target="B")
    now = utcnow()
    claimed = [claim_one(store, "A", owner="d1", now=now, lease_seconds=30) for _ in range(4)]
    assert [r.id if r else None for r in claimed] == [*ids, None]
    assert all(r.status == "Delivered" and r.claimed_by == "d1" for r in claimed if r)


def test_a_parked_message_waits_for_its_next_attempt_time(store: SqlStore) -> None:
    (mid,) = enqueue(store, 1)
    now = utcnow()
    assert claim_one(store, "A", owner="d", now=now, lease_seconds=30) is not None
    store.apply(Transition(mid, None, Requeue(now + timedelta(seconds=60), retry=True)))
    assert claim_one(store, "A", owner="d", now=now, lease_seconds=30) is None
    assert store.next_due_time("A") == now + timedelta(seconds=60)
    later = claim_one(store, "A", owner="d", now=now + timedelta(seconds=61), lease_seconds=30)
    assert later is not None and later.id == mid and later.retry_needed


def test_a_message_whose_lease_expired_is_taken_over(store: SqlStore) -> None:
    (mid,) = enqueue(store, 1)
    now = utcnow()
    assert claim_one(store, "A", owner="dead", now=now, lease_seconds=5) is not None
    assert claim_one(store, "A", owner="alive", now=now + timedelta(seconds=1),
                            lease_seconds=5) is None
    row = claim_one(store, "A", owner="alive", now=now + timedelta(seconds=6), lease_seconds=5)
    assert row is not None and row.id == mid and row.claimed_by == "alive"


def test_concurrent_claims_never_hand_out_a_message_twice(store: SqlStore) -> None:
    ids = enqueue(store, 60)
    taken: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        while (row := claim_one(store, "A", owner=threading.current_thread().name,
                                       now=utcnow(), lease_seconds=30)) is not None:
            with lock:
                taken.append(row.id)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == ids


def test_attempts_and_completion_are_recorded_with_the_response_linked(store: SqlStore) -> None:
    (mid,) = enqueue(store, 1)
    now = utcnow()
    claim_one(store, "A", owner="d", now=now, lease_seconds=30)
    aid = store.begin_attempt(mid, 1, started_at=now)
    assert store.open_attempt(mid) is not None
    rid = store.complete(store.get_message(mid), response_class=None,
                         response_body='{"ok": true}', now=now,
                         attempt=AttemptEnd(aid, now + timedelta(seconds=1), "http://x"))
    assert store.open_attempt(mid) is None
    req, resp = store.get_message(mid), store.get_message(rid)
    assert req.status == "Completed" and req.corresponding_id == rid
    assert resp.kind == "response" and resp.corresponding_id == mid
    assert resp.session_id == req.session_id
    (attempt,) = store.attempts(mid)
    assert (attempt.attempt, attempt.outcome, attempt.server) == (1, "ok", "http://x")
    assert req.first_attempt_at == now


def test_events_are_appended_with_their_context(store: SqlStore) -> None:
    store.events.write("Error", "boom", config_name="A", message_id=7, session_id=7)
    from engine.store import queries
    (row,) = queries.events(store, queries.EventFilter(type="Error"))
    assert (row["text"], row["config_name"], row["message_id"]) == ("boom", "A", 7)
