"""Leases, FIFO claims, work announcements and the database clock, on SQLite and PostgreSQL
(docs/architecture.md: several daemons on one database)."""
from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.clock import SystemClock, VirtualClock, utcnow
from engine.config.production import parse_production
from engine.delivery.item import ItemContext, ItemRunner
from engine.delivery.worker import CRASH_TEXT
from engine.errors import StoreError
from engine.runtime.cluster import (
    LEADER,
    DatabaseClock,
    LeaseKeeper,
    item_lease_name,
    pid_namespace,
    reap_dead_local_daemons,
)
from engine.runtime.daemon import Daemon
from engine.store.notify import Announcement, Kind, QueueListener
from engine.store.sql import Claimed, Completion, SqlStore
from engine.store.transition import Requeue, Transition
from tests.claiming import claim_one
from tests.servers import HttpTestServer, respond
from tests.waiting import wait_until

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = 10.0  # seconds


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# -- the lease table ---------------------------------------------------------------------
def test_a_free_lease_is_taken_and_then_refused_to_others(store: SqlStore) -> None:
    assert store.leases.acquire("leader", "a", now=at(0), lease_seconds=LEASE)
    assert not store.leases.acquire("leader", "b", now=at(5), lease_seconds=LEASE)
    row = store.leases.get("leader")
    assert row is not None and (row.owner, row.expires_at) == ("a", at(10))


def test_the_holder_renews_its_lease_and_keeps_its_acquired_time(store: SqlStore) -> None:
    assert store.leases.acquire("leader", "a", now=at(0), lease_seconds=LEASE)
    assert store.leases.acquire("leader", "a", now=at(8), lease_seconds=LEASE)
    assert not store.leases.acquire("leader", "b", now=at(12), lease_seconds=LEASE)
    row = store.leases.get("leader")
    assert row is not None and (row.acquired_at, row.expires_at) == (at(0), at(18))


def test_an_expired_lease_is_stolen(store: SqlStore) -> None:
    assert store.leases.acquire("item:Fifo", "dead", now=at(0), lease_seconds=LEASE)
    assert not store.leases.acquire("item:Fifo", "b", now=at(10), lease_seconds=LEASE)
    assert store.leases.acquire("item:Fifo", "b", now=at(10.5), lease_seconds=LEASE)
    row = store.leases.get("item:Fifo")
    assert row is not None and (row.owner, row.acquired_at) == ("b", at(10.5))
    assert not store.leases.acquire("item:Fifo", "dead", now=at(11), lease_seconds=LEASE)


def test_only_the_holder_releases_a_lease_and_then_anyone_may_take_it(store: SqlStore) -> None:
    store.leases.acquire("leader", "a", now=at(0), lease_seconds=LEASE)
    store.leases.acquire("item:X", "a", now=at(0), lease_seconds=LEASE)
    store.leases.acquire("item:Y", "b", now=at(0), lease_seconds=LEASE)
    assert not store.leases.release("leader", "b")
    assert store.leases.release("leader", "a")
    assert store.leases.acquire("leader", "b", now=at(1), lease_seconds=LEASE)
    assert store.leases.release_all("a") == ["item:X"]
    assert [(r.name, r.owner) for r in store.leases.all()] == [("item:Y", "b"), ("leader", "b")]


def test_racing_daemons_never_both_take_a_lease(store: SqlStore) -> None:
    results: dict[str, bool] = {}
    start = threading.Barrier(8)

    def race(owner: str) -> None:
        start.wait()
        results[owner] = store.leases.acquire("leader", owner, now=utcnow(), lease_seconds=30)

    threads = [threading.Thread(target=race, args=(f"d{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o, won in results.items() if won]
    assert len(winners) == 1
    row = store.leases.get("leader")
    assert row is not None and row.owner == winners[0]


# -- LeaseKeeper: one daemon's view ------------------------------------------------------
def keeper(store: SqlStore, owner: str, clock: VirtualClock) -> LeaseKeeper:
    return LeaseKeeper(store, owner, clock=clock, lease_seconds=LEASE, retry_seconds=1.0)


def test_the_leader_lease_passes_to_another_daemon_when_the_leader_goes_silent(
        store: SqlStore) -> None:
    clock = VirtualClock(T0)
    a, b = keeper(store, "a", clock), keeper(store, "b", clock)
    for k in (a, b):
        k.want(LEADER)
    assert a.renew() == [LEADER] and b.renew() == []
    clock.advance(5)
    a.renew()  # renewed until 15
    clock.advance(8)
    assert a.holds(LEADER) and b.renew() == []
    clock.advance(1)  # 14: a missed its heartbeats; it stops counting on the lease early
    assert not a.holds(LEADER)
    clock.advance(1.5)  # 15.5: expired in the table
    assert b.renew() == [LEADER]
    assert a.renew() == [] and not a.holds(LEADER)


def test_a_fifo_worker_takes_a_free_item_lease_at_most_once_per_retry_interval(
        store: SqlStore) -> None:
    clock = VirtualClock(T0)
    a, b = keeper(store, "a", clock), keeper(store, "b", clock)
    name = item_lease_name("Fifo")
    for k in (a, b):
        k.want(name)
    assert a.hold(name) and not b.hold(name)
    a.release(name)  # a stops: b may take it, but only at its next try
    assert not b.hold(name)
    clock.advance(1.0)
    assert b.hold(name) and b.held() == [name]


def test_stopping_gives_up_every_lease(store: SqlStore) -> None:
    clock = VirtualClock(T0)
    a = keeper(store, "a", clock)
    a.want(LEADER)
    a.want(item_lease_name("Fifo"))
    a.renew()
    assert a.release_all() == ["item:Fifo", "leader"]
    assert store.leases.all() == [] and a.held() == []


# -- FIFO claims -------------------------------------------------------------------------
def enqueue(store: SqlStore, n: int, target: str = "Fifo") -> list[int]:
    return [store.enqueue(target=target, body_class=None, body=f'{{"n": {i}}}', now=T0)
            for i in range(n)]


def test_a_fifo_claim_never_overtakes_a_head_held_by_another_daemon(store: SqlStore) -> None:
    first, second = enqueue(store, 2)
    assert claim_one(store, "Fifo", owner="dead", now=at(0), lease_seconds=LEASE).id == first
    assert claim_one(store, "Fifo", owner="b", now=at(5), lease_seconds=LEASE,
                            fifo=True) is None
    row = claim_one(store, "Fifo", owner="b", now=at(11), lease_seconds=LEASE, fifo=True)
    assert row is not None and (row.id, row.claimed_by) == (first, "b")
    store.complete(store.get_message(first), response_class=None, response_body=None,
                   now=at(12))
    assert claim_one(store, "Fifo", owner="b", now=at(12), lease_seconds=LEASE,
                            fifo=True).id == second


def test_a_fifo_claim_waits_for_a_parked_head(store: SqlStore) -> None:
    first, _ = enqueue(store, 2)
    claim_one(store, "Fifo", owner="a", now=at(0), lease_seconds=LEASE)
    store.apply(Transition(first, None, Requeue(at(30), retry=True)))  # a stopped mid-wait
    assert claim_one(store, "Fifo", owner="b", now=at(1), lease_seconds=LEASE,
                            fifo=True) is None
    assert claim_one(store, "Fifo", owner="b", now=at(30), lease_seconds=LEASE,
                            fifo=True).id == first


def test_a_lost_claim_is_released_only_while_its_owner_still_holds_it(store: SqlStore) -> None:
    (mid,) = enqueue(store, 1)
    claim_one(store, "Fifo", owner="d", now=at(0), lease_seconds=LEASE)
    assert not store.release_claim(mid, "other")
    assert store.release_claim(mid, "d") and store.get_message(mid).status == "Queued"
    claim_one(store, "Fifo", owner="d", now=at(0), lease_seconds=LEASE)
    store.complete(store.get_message(mid), response_class=None, response_body=None, now=at(1))
    assert not store.release_claim(mid, "d") and store.get_message(mid).status == "Completed"


class CompleteFailsOnce(SqlStore):
    """A store whose first group commit of successes fails, as when the database blips."""

    failed = False

    def complete_many(self, completions: list[Completion], **kwargs: Any) -> list[int]:
        self._blip(completions)
        return super().complete_many(completions, **kwargs)

    def complete_and_claim(self, completions: list[Completion], **kwargs: Any
                           ) -> tuple[list[int], list[Claimed]]:
        self._blip(completions)
        return super().complete_and_claim(completions, **kwargs)

    def _blip(self, completions: list[Completion]) -> None:
        if completions and not self.failed:
            self.failed = True
            raise StoreError("database unavailable: connection reset")


def test_a_fifo_item_is_not_stuck_behind_a_group_commit_cut_short_by_the_database(
        database_url: str) -> None:
    store = CompleteFailsOnce(database_url)
    store.upgrade()
    production = parse_production(
        '[[items]]\nname = "Fifo"\nclass = "tests.unit.sample_ops:EchoOperation"\n'
        '[items.settings]\nretry_interval = 0.1\n', env={})
    runner = ItemRunner(production.item("Fifo"), ItemContext(
        store=store, clock=SystemClock(), owner="d", lease_seconds=LEASE, poll_interval=0.05,
        lease=lambda: True))
    ids = [store.enqueue(target="Fifo", body_class="tests.unit.sample_ops:Ping",
                         body=f'{{"text": "m{i}"}}') for i in range(2)]
    runner.start()
    try:
        wait_until(lambda: all(store.get_message(i).status == "Completed" for i in ids), 15,
                   "both messages to complete")
        assert store.failed
        # the success was kept and committed on the next try: nothing was sent twice
        for message_id in ids:
            (only,) = store.attempts(message_id)
            assert only.outcome == "ok"
    finally:
        runner.request_stop()
        runner.join(5)
        store.dispose()


class RetryStartFailsOnce(SqlStore):
    """A store that loses the database once, as the start of a retry is written (a full
    disk): the delivery is cut short while the messages behind it wait in the queue."""

    failed = False

    def begin_attempt(self, message_id: int, attempt: int, **kwargs: Any) -> int:
        if attempt == 2 and not self.failed:
            self.failed = True
            raise StoreError("database error: database or disk is full")
        return super().begin_attempt(message_id, attempt, **kwargs)


def test_a_fifo_message_whose_retry_the_database_cut_short_is_not_overtaken(
        database_url: str) -> None:
    """Its claim is no longer taken for held: the dispatcher claims nothing behind it while
    the worker waits out the error, and the message is sent again before the next one."""
    first: dict[str, int] = {}

    def refuse_m0_once(handler: Any, record: Any) -> None:
        tag = record.body.decode()
        first[tag] = first.get(tag, 0) + 1
        respond(503 if tag == "m0" and first[tag] == 1 else 200, "x")(handler, record)

    store = RetryStartFailsOnce(database_url)
    store.upgrade()
    with HttpTestServer({"/fifo": refuse_m0_once}) as server:
        production = parse_production(
            '[[items]]\nname = "Fifo"\nclass = "operations.http:HttpOperation"\n'
            f'[items.settings]\nurl = "{server.url}"\nretry_interval = 0.1\n', env={})
        runner = ItemRunner(production.item("Fifo"), ItemContext(
            store=store, clock=SystemClock(), owner="d", lease_seconds=LEASE,
            poll_interval=0.05, lease=lambda: True))
        def enqueue(i: int) -> int:
            return store.enqueue(target="Fifo", body_class="operations.http:HttpRequest",
                                 body=f'{{"method": "POST", "path": "/fifo", "body": "m{i}"}}')

        ids = [enqueue(0)]
        runner.start()
        try:  # the others come while the worker waits out the error: a claim of their own
            wait_until(lambda: store.failed, 10, "the retry's start to fail")
            ids += [enqueue(1), enqueue(2)]
            wait_until(lambda: all(store.get_message(i).status == "Completed" for i in ids), 20,
                       "every message to complete")
        finally:
            runner.request_stop()
            runner.join(5)
            store.dispose()
        assert store.failed
        sent = [r.body.decode() for r in server.requests]
    assert sent == ["m0", "m0", "m1", "m2"]  # m0 again before m1: never after a later one


class EndAttemptFailsOnce(SqlStore):
    """A store that loses the database once, as a failed attempt's end is written (with what
    it leads to): the delivery is cut short with its attempt open and its message still
    claimed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failed = threading.Event()

    def apply(self, transition: Transition) -> int | None:
        ended = transition.attempt
        if ended is not None and ended.outcome != "ok" and not self.failed.is_set():
            self.failed.set()
            raise StoreError("database unavailable: connection reset")
        return super().apply(transition)


def test_a_graceful_stop_releases_a_delivery_cut_short_by_the_database_at_once(
        database_url: str) -> None:
    store = EndAttemptFailsOnce(database_url)
    store.upgrade()
    production = parse_production(  # a lease far longer than the test: no expiry helps
        f'[production]\nname = "P"\ndatabase = "{database_url}"\npoll_interval = 0.05\n'
        'lease_seconds = 600\n[[items]]\nname = "Twice"\n'
        'class = "tests.unit.sample_ops:RetryTwiceOperation"\n'
        '[items.settings]\nretry_interval = 0.1\n', env={})
    try:
        mid = store.enqueue(target="Twice", body_class=None, body="{}")
        daemon = Daemon(production, store=store, env={})
        daemon.start()
        try:
            assert store.failed.wait(15), "the first attempt never ended"
        finally:
            assert daemon.stop()  # clean: every worker joined, no blanket release of claims
        row = store.get_message(mid)
        assert (row.status, row.claimed_by) == ("Queued", None)  # at once, not in 600 s
        (open_attempt,) = store.attempts(mid)
        assert open_attempt.ended_at is None
        daemon = Daemon(production, store=store, env={})
        daemon.start()  # the next delivery: attempt 1 is outcome unknown, and says why
        try:
            wait_until(lambda: store.get_message(mid).status == "Completed", 15, "the message")
        finally:
            daemon.stop()
        first = store.attempts(mid)[0]
        assert first.error_text == CRASH_TEXT
        assert "the daemon stopped, or lost its database" in first.error_text
    finally:
        store.dispose()


# -- announcements -----------------------------------------------------------------------
def test_work_is_announced_in_process_after_each_commit(store: SqlStore) -> None:
    heard: list[tuple[Kind, str]] = []

    def hear(note: Announcement) -> None:  # checked after: the announcer swallows a raise
        heard.append((note.kind, note.item))

    store.add_queue_callback(hear)
    (mid,) = enqueue(store, 1, target="A")
    claim_one(store, "A", owner="d", now=at(0), lease_seconds=LEASE)
    store.release(mid)
    claim_one(store, "A", owner="d", now=at(0), lease_seconds=LEASE)
    assert store.release_claims("d") == 1
    store.announce(["B", "B"])
    store.remove_queue_callback(hear)
    enqueue(store, 1, target="C")
    assert heard == [(Kind.WORK, "A"), (Kind.WORK, "A"), (Kind.WORK, "A"), (Kind.WORK, "B")]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_another_process_hears_of_new_work_at_once_through_notify(store: SqlStore) -> None:
    heard: list[tuple[str, float]] = []
    listener = QueueListener(store.engine,
                             lambda note: heard.append((note.item, time.monotonic())))
    other = SqlStore(store.url)  # another daemon: its own engine and connections
    listener.start()
    try:
        assert listener.connected.wait(5)
        sent = time.monotonic()
        other.enqueue(target="Fast", body_class=None, body="{}")
        wait_until(lambda: heard, 5, "the listener to hear of the new message")
    finally:
        listener.stop()
        other.dispose()
    assert heard and heard[0][0] == "Fast"
    assert heard[0][1] - sent < 2.0  # milliseconds in practice; generous on a loaded machine


# -- the database clock ------------------------------------------------------------------
class SkewedClock(VirtualClock):
    """A host whose wall clock is an hour fast; monotonic time is real."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return utcnow() + timedelta(hours=1)


def test_a_daemon_clock_follows_the_database_server_on_postgresql(store: SqlStore) -> None:
    clock = DatabaseClock(store, SkewedClock())
    assert clock.sync() == 0.0  # the first reading is no step, whatever the skew
    if store.is_postgres:
        assert abs(clock.offset + 3600) < 1
        assert abs((clock.now() - store.db_now()).total_seconds()) < 1
    else:  # SQLite's clock is this host's: nothing to correct
        assert abs(clock.offset) < 0.1


# -- daemons that are gone ---------------------------------------------------------------
DEAD_PID = 2**22 + 12345  # above pid_max: no such process here


@pytest.mark.parametrize(("namespace", "reaped"), [
    # this namespace of this boot: the PID is checked, and the dead daemon forgotten
    (pid_namespace(), True),
    # another namespace (a container with the same host name): only its lease can expire
    ("another-boot/pid:[4026531999]", False),
])
def test_only_a_daemon_of_this_pid_namespace_is_judged_by_its_pid(
        store: SqlStore, namespace: str | None, reaped: bool) -> None:
    (mid,) = enqueue(store, 1, target="A")
    store.register_daemon("peer", host="same-host", pid=DEAD_PID, production="P", items="A",
                          now=at(0), pid_namespace=namespace)
    claim_one(store, "A", owner="peer", now=at(0), lease_seconds=LEASE)
    store.leases.acquire("item:A", "peer", now=at(0), lease_seconds=LEASE)
    reap_dead_local_daemons(store, "same-host", pid_namespace())
    row = store.get_message(mid)
    assert (row.status, row.claimed_by) == (("Queued", None) if reaped else ("Delivered", "peer"))
    assert (store.leases.get("item:A") is None) is reaped


def test_a_claim_orphaned_by_a_lost_commit_expires_and_its_message_finishes(
        store: SqlStore, database_url: str) -> None:
    # A claim (with attempt 1 begun) committed, but its daemon never learned of it — as when a
    # commit is acknowledged and then lost in a database crash, or a worker moved on. The
    # heartbeat renews only the claims the daemon really holds, so this one expires.
    with HttpTestServer({"/x": respond(200, "ok")}) as server:
        production = parse_production(
            f'[production]\nname = "P"\ndatabase = "{database_url}"\npoll_interval = 0.05\n'
            f'lease_seconds = 1.5\n[[items]]\nname = "Orphan"\n'
            f'class = "operations.http:HttpOperation"\n'
            f'[items.settings]\nurl = "{server.url}/x"\nretry_interval = 0.1\n', env={})
        (mid,) = store.enqueue_many(target="Orphan", bodies=[
            ("operations.http:HttpRequest", '{"method": "GET"}')])
        daemon = Daemon(production, store=store, env={})
        (orphan,) = store.claim("Orphan", owner=daemon.id, now=utcnow(), lease_seconds=1.5,
                                begin=True)
        assert orphan.begun is not None
        daemon.start()
        try:
            wait_until(lambda: store.get_message(mid).status == "Completed", 20,
                       "the orphaned claim to expire and the message to finish")
        finally:
            daemon.stop()
    first, second = store.attempts(mid)
    assert first.error_text.startswith("outcome unknown") and second.outcome == "ok"
