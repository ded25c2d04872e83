"""HashGate (engine/serving/hash_gate.py): a few password checks at once, a short queue, the
rest refused at once — without a clock: the waits are on threads and events."""
from __future__ import annotations

import threading

import pytest

from engine.serving.hash_gate import MAX_SLOTS, HashGate, HashGateBusy, default_slots
from tests.waiting import wait_until

LONG_WAIT = 30.0  # seconds a queued check may wait: far more than the test takes


def test_a_check_past_the_slots_and_the_queue_is_refused_at_once_and_a_queued_one_goes_on(
        ) -> None:
    gate = HashGate(1, queue=1, wait=LONG_WAIT)
    went_on = threading.Event()

    def queued() -> None:
        with gate.slot():
            went_on.set()
    with gate.slot():
        waiter = threading.Thread(target=queued)
        waiter.start()
        wait_until(lambda: gate.waiting == 1, LONG_WAIT, "a check in the queue")
        with pytest.raises(HashGateBusy) as busy:  # no slot, no place in the queue
            with gate.slot():
                pass
        assert busy.value.retry_after == LONG_WAIT
        with pytest.raises(HashGateBusy):
            gate.check()
        assert gate.refused == 2 and not went_on.is_set()
    waiter.join(LONG_WAIT)
    assert went_on.is_set() and gate.waiting == 0
    gate.check()  # a slot is free again
    with gate.slot():
        pass


def test_a_queued_check_is_refused_when_its_wait_runs_out() -> None:
    gate = HashGate(1, queue=4, wait=0.0)  # a wait of 0 s: refused as soon as it queues
    with gate.slot():
        gate.check()  # the queue has room: check lets it try
        with pytest.raises(HashGateBusy) as busy:
            with gate.slot():
                pass
    assert busy.value.retry_after >= 1  # Retry-After is never 0
    assert gate.waiting == 0 and gate.refused == 1


def test_a_gate_has_at_least_one_slot_and_the_default_at_most_max_slots() -> None:
    assert 1 <= default_slots() <= MAX_SLOTS
    with pytest.raises(ValueError, match="at least 1 slot"):
        HashGate(0)
