"""The circuit breaker's and the rate limit's shared state on SQLite and PostgreSQL
(docs/guards.md): each transition and each slot one atomic statement, also when many
workers race for it."""
from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.store.notify import Announcement, QueueListener
from engine.store.sql import SqlStore
from tests.waiting import wait_until

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ITEM = "Payments"
RACERS = 8  # threads, each with its own connection, racing for one row


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def race(func: Callable[[int], Any], n: int = RACERS) -> list[Any]:
    """Run ``func(i)`` in ``n`` threads released together; their results in order."""
    results: list[Any] = [None] * n
    start = threading.Barrier(n)

    def run(i: int) -> None:
        start.wait()
        results[i] = func(i)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


# -- rate buckets ----------------------------------------------------------------------------

def test_the_bucket_gives_its_burst_then_reserves_one_slot_per_interval(
        store: SqlStore) -> None:
    store.rate_buckets.ensure(ITEM, capacity=5, now=at(0))
    waits = [store.rate_buckets.take(ITEM, capacity=5, per_second=5, now=at(0))
             for _ in range(7)]
    assert [round(w, 6) for w in waits] == [0, 0, 0, 0, 0, 0.2, 0.4]
    later = store.rate_buckets.take(ITEM, capacity=5, per_second=5, now=at(0.35))
    assert round(later, 6) == 0.25  # the slot at 0.6
    assert round(store.rate_buckets.take(ITEM, capacity=5, per_second=5, now=at(100)), 6) == 0


def test_racing_workers_each_get_a_slot_of_their_own(store: SqlStore) -> None:
    store.rate_buckets.ensure(ITEM, capacity=3, now=at(0))
    stores = [SqlStore(store.url) for _ in range(RACERS)]  # daemons with their own engines
    try:
        waits = race(lambda i: stores[i].rate_buckets.take(ITEM, capacity=3, per_second=10,
                                                           now=at(0)))
    finally:
        for s in stores:
            s.dispose()
    assert sorted(round(w, 6) for w in waits) == [0, 0, 0, 0.1, 0.2, 0.3, 0.4, 0.5]


def test_a_clock_slightly_behind_never_refills_backwards(store: SqlStore) -> None:
    store.rate_buckets.ensure(ITEM, capacity=2, now=at(10))
    takes = [store.rate_buckets.take(ITEM, capacity=2, per_second=1, now=at(t))
             for t in (10, 10, 9.99, 10.5)]
    assert [round(w, 6) for w in takes] == [0, 0, 1.0, 1.5]


# -- breakers --------------------------------------------------------------------------------

def test_the_failure_that_reaches_the_threshold_opens_it_and_only_that_one(
        store: SqlStore) -> None:
    store.breakers.ensure(ITEM, now=at(0))
    rows = race(lambda i: store.breakers.record_failure(ITEM, threshold=3, open_seconds=30,
                                                        now=at(1)))
    opened = [r for r in rows if r is not None and r.state == "open"]
    counted = [r for r in rows if r is not None]
    assert len(opened) == 1 and len(counted) == 3  # the rest came after it opened
    row = store.breakers.get(ITEM)
    assert row is not None and (row.state, row.failures, row.open_until) == ("open", 3, at(31))


def test_exactly_one_racer_gets_the_probe(store: SqlStore) -> None:
    store.breakers.ensure(ITEM, now=at(0))
    for _ in range(2):
        store.breakers.record_failure(ITEM, threshold=2, open_seconds=30, now=at(0))
    assert store.breakers.take_probe(ITEM, "early", now=at(29.9), probe_seconds=35) is None
    stores = [SqlStore(store.url) for _ in range(RACERS)]
    try:
        won = race(lambda i: stores[i].breakers.take_probe(ITEM, f"d{i}", now=at(30),
                                                           probe_seconds=35))
    finally:
        for s in stores:
            s.dispose()
    winners = [r for r in won if r is not None]
    assert len(winners) == 1 and winners[0].state == "half_open"
    assert winners[0].open_until == at(65)
    owner = winners[0].probe_owner
    assert owner is not None
    assert store.breakers.close(ITEM, "someone else", now=at(31)) is None
    closed = store.breakers.close(ITEM, owner, now=at(31))
    assert closed is not None and (closed.state, closed.failures) == ("closed", 0)


def test_a_failed_probe_opens_it_again_and_a_lost_one_is_taken_over(store: SqlStore) -> None:
    store.breakers.ensure(ITEM, now=at(0))
    store.breakers.record_failure(ITEM, threshold=1, open_seconds=30, now=at(0))
    assert store.breakers.take_probe(ITEM, "a", now=at(30), probe_seconds=35) is not None
    again = store.breakers.reopen(ITEM, "a", now=at(31), open_seconds=30)
    assert again is not None and (again.state, again.open_until) == ("open", at(61))
    assert store.breakers.take_probe(ITEM, "b", now=at(61), probe_seconds=35) is not None
    assert store.breakers.take_probe(ITEM, "c", now=at(95.9), probe_seconds=35) is None
    assert store.breakers.take_probe(ITEM, "c", now=at(96), probe_seconds=35) is not None
    assert store.breakers.reopen(ITEM, "b", now=at(97), open_seconds=30) is None
    assert store.breakers.get(ITEM).probe_owner == "c"  # type: ignore[union-attr]


def test_a_success_resets_the_count_of_a_closed_breaker_only(store: SqlStore) -> None:
    store.breakers.ensure(ITEM, now=at(0))
    store.breakers.record_failure(ITEM, threshold=3, open_seconds=30, now=at(0))
    store.breakers.reset_failures(ITEM, now=at(1))
    assert store.breakers.get(ITEM).failures == 0  # type: ignore[union-attr]
    for _ in range(3):
        store.breakers.record_failure(ITEM, threshold=3, open_seconds=30, now=at(2))
    store.breakers.reset_failures(ITEM, now=at(3))
    row = store.breakers.get(ITEM)
    assert row is not None and (row.state, row.failures) == ("open", 3)


@pytest.mark.postgres
def test_opening_and_closing_are_announced_to_every_daemon(pg_store: SqlStore) -> None:
    store = pg_store
    heard: list[Announcement] = []
    listener = QueueListener(store.engine, heard.append)
    listener.start()
    try:
        assert listener.connected.wait(5)
        store.breakers.ensure(ITEM, now=at(0))
        store.breakers.record_failure(ITEM, threshold=2, open_seconds=30, now=at(0))
        store.breakers.record_failure(ITEM, threshold=2, open_seconds=30, now=at(0))
        store.breakers.take_probe(ITEM, "a", now=at(30), probe_seconds=35)
        store.breakers.close(ITEM, "a", now=at(31))
        wait_until(lambda: len(heard) >= 2, 5, "two announcements")
    finally:
        listener.stop()
    # opened, closed; not the probe
    assert heard == [Announcement.breaker(ITEM), Announcement.breaker(ITEM)]
