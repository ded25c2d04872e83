"""Direct takes (docs/waiting.md): a message someone waits for, accepted in the process where
its item runs with a worker free, is claimed by the transaction that accepts it and handed to
that worker — no announcement, no wake-up, no claim of its own. Everything else is queued and
claimed as before: a message nobody waits for, no worker free, the item switched off, a FIFO
item with a message ahead, a stopped dispatcher, PostgreSQL. And a taken message whose
daemon dies is delivered after its lease, as any claimed one.

The dispatcher is driven by hand on a virtual clock against a real store.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import text

from engine.clock import VirtualClock, utcnow
from engine.delivery.dispatch import Dispatcher, DispatchSettings
from engine.store.hotpath import Claimed, Grant
from engine.store.sql import SqlStore
from tests.integration.test_dispatcher_wakeups import handed_out
from tests.waiting import wait_until


def dispatcher(store: SqlStore, clock: VirtualClock, *, owner: str = "d1",
               pool_size: int = 1, fifo: bool = False, begin: bool = True,
               direct: Callable[[], bool] = lambda: True) -> Dispatcher:
    return Dispatcher(DispatchSettings(target="A", owner=owner, pool_size=pool_size, fifo=fifo,
                                       begin=begin, enabled=True, lease_seconds=60,
                                       poll_interval=5),
                      store=store, clock=clock, ready=lambda: True, stop=threading.Event(),
                      direct=direct)


def waited(store: SqlStore, clock: VirtualClock) -> int:
    return store.accept(target="A", body_class=None, body="{}", waited=True,
                        now=clock.now()).id


def test_a_waited_message_is_claimed_by_its_intake_and_handed_to_a_free_worker(
        store: SqlStore) -> None:
    clock = VirtualClock()
    d = dispatcher(store, clock)
    takes = store.add_taker("A", d)
    assert takes == (not store.is_postgres)  # PostgreSQL: claimed as before, for now
    mid = waited(store, clock)
    row = store.get_message(mid)
    assert row is not None
    if not takes:
        assert row.status == "Queued" and handed_out(d) == []
        d.tick()
        assert handed_out(d) == [mid]
        return
    assert handed_out(d) == [mid]  # no tick: the intake handed it over
    assert (row.status, row.claimed_by, row.claim_token) == ("Delivered", "d1", 1)
    assert row.time_processed == row.time_created == row.first_attempt_at  # one transaction
    assert row.attempts == 1 and [a.attempt for a in store.attempts(mid)] == [1]  # begun
    assert d.book.ids() == [mid]  # booked: the heartbeat renews its lease
    plain = store.accept(target="A", body_class=None, body="{}", now=clock.now()).id
    row = store.get_message(plain)
    assert row is not None and row.status == "Queued"  # nobody waits for it: queued


def test_without_a_free_worker_or_switched_off_the_message_is_queued(
        store: SqlStore) -> None:
    clock = VirtualClock()
    allowed = threading.Event()
    allowed.set()
    d = dispatcher(store, clock, direct=allowed.is_set)
    if not store.add_taker("A", d):
        return  # PostgreSQL: see the test above
    first = waited(store, clock)
    assert handed_out(d) == [first]
    busy = waited(store, clock)  # pool_size 1, its worker busy with the first
    row = store.get_message(busy)
    assert row is not None and row.status == "Queued"
    d.finished(first, 0.001)
    store.set_item_enabled("A", False, reason="maintenance", now=clock.now())
    off = waited(store, clock)  # the operator's switch, read by the intake's own claim
    row = store.get_message(off)
    assert row is not None and row.status == "Queued" and handed_out(d) == []
    store.set_item_enabled("A", True, reason="", now=clock.now())
    d.held_back.set()  # held back by the dispatcher: no direct take either
    held = waited(store, clock)
    row = store.get_message(held)
    assert row is not None and row.status == "Queued"
    d.held_back.clear()
    allowed.clear()  # a guard, a window or another daemon's FIFO lease
    refused = waited(store, clock)
    row = store.get_message(refused)
    assert row is not None and row.status == "Queued"
    clock.advance(1)  # past the linger that followed the take
    d.tick()  # the dispatcher claims them all, in order, as usual
    assert handed_out(d) == [busy, off, held, refused]


def test_a_fifo_item_takes_a_message_only_with_nothing_ahead_of_it(store: SqlStore) -> None:
    clock = VirtualClock()
    d = dispatcher(store, clock, fifo=True, begin=False)
    if not store.add_taker("A", d):
        return
    other = Dispatcher(DispatchSettings(target="A", owner="d2", pool_size=1, fifo=True,
                                        begin=False, enabled=True, lease_seconds=60,
                                        poll_interval=5),
                       store=store, clock=clock, ready=lambda: True, stop=threading.Event())
    ahead = store.accept(target="A", body_class=None, body="{}", now=clock.now()).id
    behind = waited(store, clock)
    row = store.get_message(behind)
    assert row is not None and row.status == "Queued" and handed_out(d) == []
    other.tick()  # another daemon holds the head...
    assert handed_out(other) == [ahead, behind]
    assert d.reserve() is not None  # ...so even with a free worker here
    d.release()
    third = waited(store, clock)  # nothing goes past a message delivered elsewhere
    row = store.get_message(third)
    assert row is not None and row.status == "Queued"
    assert handed_out(d) == []


def test_a_message_taken_as_the_dispatcher_stops_goes_back_to_the_queue(
        store: SqlStore) -> None:
    clock = VirtualClock()
    d = dispatcher(store, clock)

    class StopsMeanwhile:
        """Reserves a worker, then the dispatcher stops before the message is handed over."""

        def reserve(self) -> Grant | None:
            grant = d.reserve()
            d.stop.set()
            d.start()  # its loop ends at once: it tells the workers to stop
            wait_until(lambda: d.work.qsize() > 0, 10, "the workers to be told to stop")
            return grant

        def take(self, claimed: Claimed) -> None:
            d.take(claimed)

        def release(self) -> None:
            d.release()

    if not store.add_taker("A", StopsMeanwhile()):
        return
    mid = waited(store, clock)
    assert d.join(10)  # it waited for the reserved worker's message, then ended
    assert d.work.get() is None  # nothing was handed to the stopped workers
    row = store.get_message(mid)
    assert row is not None and row.status == "Queued" and row.claimed_by is None
    assert row.attempts == 0 and store.attempts(mid) == []  # the attempt begun, taken back
    with store.engine.connect() as conn:  # nothing was delivered: no delivery counted
        assert conn.execute(text("SELECT deliveries FROM message_header WHERE id = :id"),
                            {"id": mid}).scalar_one() == 0


def test_a_taken_message_whose_daemon_dies_is_delivered_after_its_lease(
        store: SqlStore) -> None:
    clock = VirtualClock(start=utcnow())
    d = dispatcher(store, clock)

    class Dies:
        """Takes the message as a daemon killed right after the intake's commit would."""

        def reserve(self) -> Grant | None:
            return d.reserve()

        def take(self, claimed: Claimed) -> None:
            pass

        def release(self) -> None:
            d.release()

    if not store.add_taker("A", Dies()):
        return
    mid = waited(store, clock)
    row = store.get_message(mid)
    assert row is not None and row.status == "Delivered"
    store.remove_taker("A", store.takers["A"])
    survivor = dispatcher(store, clock, owner="d2")
    survivor.tick()
    assert handed_out(survivor) == []  # its lease holds
    clock.advance(61)
    survivor.tick()  # the lease ended: taken back, then claimed — alone, a suspect
    (claimed,) = [c for work in [survivor.work.get()] if work for c in work[1]]
    assert claimed.row.id == mid and claimed.row.claimed_by == "d2"
    assert claimed.interrupted == 1


def test_an_idempotency_key_is_honoured_by_the_taking_intake(store: SqlStore) -> None:
    """A business process's call carries a key: taken directly the first time; the same key
    again returns that message, creates nothing and takes no worker."""
    clock = VirtualClock()
    d = dispatcher(store, clock, pool_size=2)
    if not store.add_taker("A", d):
        return
    first = store.accept(target="A", body_class=None, body="{}", waited=True,
                         idempotency_key="proc:7:1:0", now=clock.now())
    assert first.created and handed_out(d) == [first.id]
    again = store.accept(target="A", body_class=None, body="{}", waited=True,
                         idempotency_key="proc:7:1:0", now=clock.now())
    assert (again.id, again.created) == (first.id, False) and handed_out(d) == []
    assert d.reserve() is not None  # the pool's second worker is still free
    d.release()
