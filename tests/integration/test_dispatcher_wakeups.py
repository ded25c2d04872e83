"""When new work wakes a dispatcher: only while it waits for work, and never too late.

The dispatcher is stepped by hand (``tick()``) on a virtual clock, against a real store; a
test plays the producer (``enqueue`` then ``announce``) and the worker (``finished``).
"""
from __future__ import annotations

import threading
from typing import Any

from engine.clock import VirtualClock
from engine.delivery.dispatch import (
    CHUNK_WORK,
    CLAIM_LINGER,
    Dispatcher,
    DispatchSettings,
    DispatchTuning,
)
from engine.store.sql import SqlStore


def dispatcher(store: SqlStore, clock: VirtualClock, pool_size: int = 1, *,
               fifo: bool = False, urgent_here: bool = True) -> Dispatcher:
    return Dispatcher(DispatchSettings(target="A", owner="d1", pool_size=pool_size, fifo=fifo,
                                       begin=True, enabled=True, lease_seconds=60,
                                       poll_interval=5),
                      store=store, clock=clock, ready=lambda: True, stop=threading.Event(),
                      tuning=DispatchTuning(urgent_here=urgent_here))


def produce(store: SqlStore, d: Dispatcher, n: int = 1) -> list[int]:
    """What intake does: commit, then announce (the daemon's callback)."""
    ids = [store.enqueue(target="A", body_class=None, body="{}") for _ in range(n)]
    d.announce()
    return ids


def handed_out(d: Dispatcher) -> list[int]:
    out = []
    while not d.work.empty():
        work = d.work.get()
        assert work is not None
        out.extend(c.row.id for c in work[1])
    return out


def test_an_idle_dispatcher_is_woken_by_new_work(store: SqlStore) -> None:
    d = dispatcher(store, VirtualClock())
    assert d.tick() == 5  # nothing to claim: it waits for the poll interval or for work
    d.wakeup.clear()
    ids = produce(store, d)
    assert d.wakeup.is_set()
    d.tick()
    assert handed_out(d) == ids


def test_a_busy_or_lingering_dispatcher_is_not_woken_by_each_message(store: SqlStore) -> None:
    clock = VirtualClock()
    d = dispatcher(store, clock)
    first = produce(store, d, 2)
    d.tick()  # claims both (fewer than it asked for: it lingers)
    assert handed_out(d) == first
    d.wakeup.clear()
    more = produce(store, d, 3)
    assert not d.wakeup.is_set()  # the linger's end or a finished worker wakes it
    d.finished(first[0], 0.001)
    d.finished(first[1], 0.001)
    assert d.wakeup.is_set()  # the worker is out of work: it claims again
    d.wakeup.clear()
    clock.advance(CLAIM_LINGER)
    d.tick()
    assert handed_out(d) == more


def test_an_end_its_worker_committed_leaves_a_dispatcher_waiting_for_work_asleep(
        store: SqlStore) -> None:
    """A dispatcher whose last look found nothing to claim would only look again, and find
    nothing, when a worker's message ends: the end changed nothing in the queue, and new
    work wakes it. Woken, it takes the interpreter from whoever waited for that message (a
    synchronous call's caller). Everything else a finish can mean still wakes it: a message
    back in the queue, a success left for the group commit, a FIFO item's next message."""
    from engine.store.hotpath import Completion

    clock = VirtualClock()
    for case in ("ended", "back in the queue", "success pending", "fifo"):
        store.engine.dispose()
        d = dispatcher(store, clock, pool_size=2, fifo=case == "fifo")
        produce(store, d, 2)
        d.tick()  # claims both, fewer than it asked for: it lingers
        claimed = [c for _ in range(2) for c in d.work.get()[1]]  # type: ignore[index]
        clock.advance(CLAIM_LINGER)
        d.tick()  # looks again and finds nothing: it waits for new work
        assert d.awaits_work
        d.wakeup.clear()
        first = claimed[0]
        mid = first.row.id
        if case == "success pending":
            now = clock.now()
            d.defer(Completion(mid, first.row.claim_token, first.begun or 0, now, now,
                               None, None, '{"ok": true}'))
        d.finished(mid, 0.001, ended=case != "back in the queue")  # the other still in hand
        assert d.wakeup.is_set() == (case != "ended"), case
        d.flush()
        for c in claimed:
            if c is not first:
                d.finished(c.row.id, 0.001, ended=True)
            store.complete_many([Completion(c.row.id, c.row.claim_token, c.begun or 0,
                                            clock.now(), clock.now(), None, None, "{}")],
                                now=clock.now())  # done with them, whatever the case said


def test_the_last_message_in_hand_wakes_it_when_its_last_look_had_others_in_hand(
        store: SqlStore) -> None:
    """A suspect is claimed only by an item that holds nothing else: an empty look made with
    messages in hand may have passed one over, so the end of the last of them wakes it."""
    clock = VirtualClock()
    d = dispatcher(store, clock, pool_size=2)
    first, second = produce(store, d, 2)
    d.tick()
    assert handed_out(d) == [first, second]
    clock.advance(CLAIM_LINGER)
    d.tick()  # finds nothing, with both in hand
    assert d.awaits_work
    d.wakeup.clear()
    d.finished(first, 0.001, ended=True)
    assert not d.wakeup.is_set()  # one still in hand: nothing a look could claim now
    d.finished(second, 0.001, ended=True)
    assert d.wakeup.is_set()  # nothing in hand: a suspect passed over may be claimed


def test_a_worker_that_finishes_while_a_step_finds_the_pool_busy_still_wakes_it(
        store: SqlStore) -> None:
    """A step that finds no worker free waits for a finish; one that comes after the step
    looked, from a dispatcher that was waiting for work before the step, must wake it."""
    clock = VirtualClock()
    d = dispatcher(store, clock, pool_size=2)
    (first,) = produce(store, d)
    d.tick()
    assert handed_out(d) == [first]
    clock.advance(CLAIM_LINGER)
    d.tick()  # finds nothing more: it waits for new work
    assert d.awaits_work
    looked = d._free_slots

    def busy_then_finished() -> int:
        looked()
        d.finished(first, 0.001, ended=True)  # right after the look saw the pool busy
        return 0

    d._free_slots = busy_then_finished  # type: ignore[method-assign]
    d.wakeup.clear()
    d.tick()
    assert d.wakeup.is_set()  # else the queue would wait for the poll interval


def test_work_committed_just_after_the_claim_looked_still_wakes_it(store: SqlStore) -> None:
    """A producer whose commit comes after the claim's look, and whose announcement comes
    before the dispatcher has gone back to sleep, must find it willing to be woken."""
    clock = VirtualClock()
    d = dispatcher(store, clock)
    (first,) = produce(store, d)
    d.tick()  # a claim that found work: new work no longer wakes it
    assert handed_out(d) == [first]
    d.finished(first, 0.001)
    clock.advance(CLAIM_LINGER)
    d.wakeup.clear()
    late: list[int] = []
    claim = store.complete_and_claim

    def claim_then_produce(*args: Any, **kwargs: Any) -> Any:
        result = claim(*args, **kwargs)
        late.extend(produce(store, d))
        return result

    store.complete_and_claim = claim_then_produce  # type: ignore[method-assign]
    d.tick()  # the claim finds nothing; the message arrives right after it looked
    store.complete_and_claim = claim  # type: ignore[method-assign]
    assert d.wakeup.is_set()
    d.wakeup.clear()
    d.tick()
    assert handed_out(d) == late


def test_work_someone_waits_for_ends_a_linger_and_is_claimed_at_once(store: SqlStore) -> None:
    clock = VirtualClock()
    d = dispatcher(store, clock)
    first = produce(store, d, 2)
    d.tick()  # claims both, fewer than it asked for: it lingers
    assert handed_out(d) == first
    d.finished(first[0], 0.001)
    d.finished(first[1], 0.001)
    d.wakeup.clear()
    waited = store.accept(target="A", body_class=None, body="{}", waited=True).id
    d.announce(urgent=True)
    assert d.wakeup.is_set()
    d.tick()  # no virtual time has passed: the linger was cut short
    assert handed_out(d) == [waited]


def test_a_success_someone_waits_for_is_committed_on_the_workers_thread(
        store: SqlStore) -> None:
    """Not after the 20 ms group-commit window, and not after the dispatcher wakes: the
    worker's ``defer`` commits it (and its waiter hears of it) before it returns. A ticked
    dispatcher (``urgent_here`` off, as on a virtual clock) commits it at its next step."""
    from engine.store.hotpath import Completion

    clock = VirtualClock()
    for here in (True, False):
        d = dispatcher(store, clock, pool_size=2, urgent_here=here)
        (mid,) = produce(store, d, 1)
        d.tick()
        (claimed,) = d.work.get()[1]  # type: ignore[index]
        d.wakeup.clear()
        now = clock.now()
        d.defer(Completion(mid, claimed.row.claim_token, claimed.begun or 0, now, now, None,
                           None, '{"ok": true}', urgent=True))
        row = store.get_message(mid)
        assert row is not None
        if here:
            assert row.status == "Completed" and not d.wakeup.is_set()
            continue
        assert row.status == "Delivered" and d.wakeup.is_set()  # the next step commits it
        d.tick()
        row = store.get_message(mid)
        assert row is not None and row.status == "Completed"


def test_a_fast_pool_claims_a_batch_and_claims_again_only_when_half_is_done(
        store: SqlStore) -> None:
    """pool_size > 1 (issue 27): a fast item holds about BATCH_WINDOW of its pool's work,
    not one message per idle worker, so more workers never mean a transaction per message."""
    clock = VirtualClock()
    d = dispatcher(store, clock, pool_size=4)
    ids = produce(store, d, 300)
    d.tick()  # before it knows how fast it is: a little more than its pool
    first = handed_out(d)
    assert len(first) > 4
    for mid in first:  # a fast service: each message takes a millisecond
        d.finished(mid, 0.001)
    d.wakeup.clear()
    d.tick()
    batch = handed_out(d)
    assert len(batch) > 40 and batch == ids[len(first):len(first) + len(batch)]
    d.wakeup.clear()
    for mid in batch[:len(batch) // 2 - 1]:
        d.finished(mid, 0.001)
    assert not d.wakeup.is_set()  # more than half still in hand: no claim, no wake-up
    d.finished(batch[len(batch) // 2], 0.001)
    assert d.wakeup.is_set()
    d.tick()  # half is left: the next batch is as big as this one, not what would top it up
    refill = handed_out(d)
    assert len(refill) == len(batch)
    assert refill == ids[len(first) + len(batch):len(first) + 2 * len(batch)]


def test_a_slow_pool_claims_one_message_per_free_worker(store: SqlStore) -> None:
    clock = VirtualClock()
    d = dispatcher(store, clock, pool_size=4)
    produce(store, d, 200)
    d.tick()
    first = handed_out(d)
    for mid in first:  # a slow service: a second a message
        d.finished(mid, 1.0)
    for _ in range(10):
        d.tick()
        held = handed_out(d)
        for mid in held:
            d.finished(mid, 1.0)
    d.tick()
    assert len(handed_out(d)) == 4  # its pool, no more


def chunks(d: Dispatcher) -> list[int]:
    """The sizes of the chunks handed to the workers since the last look."""
    out = []
    while not d.work.empty():
        work = d.work.get()
        assert work is not None
        out.append(len(work[1]))
    return out


def test_a_fast_pool_hands_its_claim_over_in_chunks_of_a_few_milliseconds(
        store: SqlStore) -> None:
    """pool_size > 1 (issue 27): a worker takes CHUNK_WORK of work per hand-off, not one
    message, so workers of a fast item neither wake nor contend once per message."""
    clock = VirtualClock()
    d = dispatcher(store, clock, pool_size=4)
    produce(store, d, 300)
    d.tick()
    assert set(chunks(d)) == {1}  # it does not know yet how fast the item is
    ids = [i for i in range(1, 301)]
    for mid in ids[:20]:  # a message takes a millisecond: about CHUNK_WORK / 1 ms each
        d.finished(mid, 0.001)
    d.wakeup.clear()
    d.tick()
    sizes = chunks(d)
    expected = round(CHUNK_WORK / 0.001)
    assert sizes and max(sizes) == expected and sum(sizes) > 40
    assert all(s == expected for s in sizes[:-1])


def test_a_slow_pool_hands_over_one_message_at_a_time(store: SqlStore) -> None:
    clock = VirtualClock()
    d = dispatcher(store, clock, pool_size=4)
    produce(store, d, 50)
    d.tick()
    for mid in range(1, 1 + sum(chunks(d))):
        d.finished(mid, 0.05)
    d.tick()
    assert set(chunks(d)) == {1}


def test_a_pool_size_1_item_takes_its_whole_claim_in_one_hand_off(store: SqlStore) -> None:
    clock = VirtualClock()
    d = dispatcher(store, clock, pool_size=1)
    produce(store, d, 50)
    d.tick()
    sizes = chunks(d)
    assert len(sizes) == 1 and sizes[0] > 1
