"""Every attempt keeps its server (docs/architecture.md, "Durability"): the server an attempt
goes to is in the write that begins it — a claim that begins attempt 1, or begin_attempt —
and a failover records the next server before its request leaves; on SQLite and PostgreSQL."""
from __future__ import annotations

import pytest

from engine.attempt import servers_of, servers_text
from engine.clock import utcnow
from engine.errors import ClaimLost
from engine.store.hotpath import Grant
from engine.store.sql import SqlStore
from engine.store.transition import AttemptEnd, Transition
from tests.claiming import claim_one

PAY = "http://pay-a.example:8080/pay"
PAY_B = "http://pay-b.example:8080/pay"


def enqueue(store: SqlStore, n: int, target: str = "Pay") -> list[int]:
    return [store.enqueue(target=target, body_class=None, body=f'{{"n": {i}}}')
            for i in range(n)]


def test_a_claim_that_begins_attempts_records_their_server_in_the_same_statement(
        store: SqlStore) -> None:
    ids = enqueue(store, 3)
    claimed = store.claim("Pay", owner="d", now=utcnow(), lease_seconds=30, limit=3,
                          begin=True, server=PAY)
    assert [c.row.id for c in claimed] == ids
    assert all(c.begun is not None and c.server == PAY for c in claimed)
    for mid in ids:  # open (in flight) and already naming where it goes
        (attempt,) = store.attempts(mid)
        assert (attempt.server, attempt.ended_at) == (PAY, None)


def test_a_claim_that_begins_nothing_records_no_server(store: SqlStore) -> None:
    (mid,) = enqueue(store, 1)
    (claimed,) = store.claim("Pay", owner="d", now=utcnow(), lease_seconds=30, server=PAY)
    assert (claimed.begun, claimed.server) == (None, None)
    assert store.attempts(mid) == []


def test_begin_attempt_records_the_server_with_the_start(store: SqlStore) -> None:
    (mid,) = enqueue(store, 1)
    row = claim_one(store, "Pay", owner="d", now=utcnow(), lease_seconds=30)
    assert row is not None
    aid = store.begin_attempt(mid, 1, started_at=utcnow(), token=row.claim_token, server=PAY)
    assert store.open_attempt(mid).id == aid
    assert store.open_attempt(mid).server == PAY


def test_a_failover_adds_the_next_server_to_the_open_attempt(store: SqlStore) -> None:
    (mid,) = enqueue(store, 1)
    row = claim_one(store, "Pay", owner="d", now=utcnow(), lease_seconds=30)
    assert row is not None
    aid = store.begin_attempt(mid, 1, started_at=utcnow(), token=row.claim_token, server=PAY)
    store.note_attempt_server(aid, servers_text([PAY, PAY_B]) or "", token=row.claim_token)
    assert servers_of(store.open_attempt(mid).server) == [PAY, PAY_B]
    store.apply(Transition(mid, row.claim_token,
                           attempt=AttemptEnd(aid, utcnow(), f"{PAY} → {PAY_B}")))
    (attempt,) = store.attempts(mid)
    assert servers_of(attempt.server) == [PAY, PAY_B] and attempt.outcome == "ok"


def test_a_failover_write_is_fenced_by_the_claim(store: SqlStore) -> None:
    (mid,) = enqueue(store, 1)
    row = claim_one(store, "Pay", owner="d", now=utcnow(), lease_seconds=30)
    assert row is not None
    aid = store.begin_attempt(mid, 1, started_at=utcnow(), token=row.claim_token, server=PAY)
    with pytest.raises(ClaimLost):  # another claim took it: the next server is not sent to
        store.note_attempt_server(aid, f"{PAY} → {PAY_B}", token=row.claim_token + 1)
    assert store.open_attempt(mid).server == PAY


def test_a_direct_take_records_the_server_of_the_attempt_it_begins(store: SqlStore) -> None:
    class Taker:
        took: list = []

        def reserve(self) -> Grant:
            return Grant(owner="d", lease_seconds=30, begin=True, fifo=False, enabled=True,
                         server=PAY)

        def take(self, claimed) -> None:
            self.took.append(claimed)

        def release(self) -> None:
            pass

    taker = Taker()
    if not store.add_taker("Pay", taker):
        pytest.skip("direct takes are SQLite's: on PostgreSQL the intake claims nothing, so "
                    "there is no taken attempt to record a server for")
    accepted = store.accept(target="Pay", body_class=None, body="{}", waited=True)
    (claimed,) = taker.took
    assert claimed.row.id == accepted.id and claimed.server == PAY
    assert store.open_attempt(accepted.id).server == PAY


def test_a_server_too_wide_for_the_column_is_cut_not_refused(store: SqlStore) -> None:
    servers = [f"http://host-{n}.example/{'p' * 200}" for n in range(3)]
    text = servers_text(servers)
    assert text is not None and len(text) == 500 and text.endswith("…")
    (mid,) = enqueue(store, 1)
    row = claim_one(store, "Pay", owner="d", now=utcnow(), lease_seconds=30)
    assert row is not None
    store.begin_attempt(mid, 1, started_at=utcnow(), token=row.claim_token, server=text)
    assert store.open_attempt(mid).server == text
