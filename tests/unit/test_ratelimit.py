"""The rate limit on a virtual clock: parsing, the shared token bucket (burst, refill,
reserved slots, several daemons), and the limiter that waits before each attempt
(docs/guards.md)."""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from engine.clock import VirtualClock
from engine.delivery.guards import GuardSettings, ItemGuards
from engine.delivery.ratelimit import RateLimit, RateLimiter
from engine.errors import AttemptHeld, ClaimLost, ConfigurationError
from engine.host import BusinessOperation
from engine.settings import validate_settings
from engine.store.rows import MessageRow
from engine.store.sql import SqlStore
from tests.claiming import claim_one

ITEM = "Item"


@pytest.mark.parametrize(("text", "count", "period"), [
    ("5/s", 5, 1.0),  # per second
    ("300/min", 300, 60.0),  # per minute
    ("1000/h", 1000, 3600.0),  # per hour
    (" 7 / s ", 7, 1.0),  # spaces are allowed and dropped
])
def test_a_rate_is_n_per_second_minute_or_hour(text: str, count: int, period: float) -> None:
    limit = RateLimit.parse(text)
    assert (limit.count, limit.period) == (count, period)
    assert limit.text == text.replace(" ", "")


@pytest.mark.parametrize(("value", "says"), [
    ("5/x", "'5/x' is not a rate"),  # an unknown unit
    ("0/s", "N must be at least 1"),  # no attempt at all is not a limit
    ("2.5/s", "is not a rate"),  # a whole number of attempts
    ("fast", "is not a rate"),  # not a rate at all
    ("5/sec", "is not a rate"),  # only s, min and h
    (5, "expected string"),  # a number without a period
])
def test_a_wrong_rate_limit_is_refused_naming_item_and_key(value: Any, says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        validate_settings("Orders", {"rate_limit": value}, BusinessOperation.declared_settings())
    text = str(refused.value)
    assert text.startswith("item 'Orders', setting 'rate_limit': ") and says in text


def test_no_limit_and_no_breaker_by_default_cost_nothing(store: SqlStore) -> None:
    clean = validate_settings("Orders", {}, BusinessOperation.declared_settings())
    assert clean["rate_limit"] is None
    guards = ItemGuards.from_settings("Orders", GuardSettings.from_validated(clean),
                                      store=store, clock=VirtualClock(), owner="d")
    assert guards.observers == [] and guards.may_claim is None
    assert store.rate_buckets.tokens("Orders") is None and store.breakers.get("Orders") is None


def test_the_limiter_runs_before_the_breaker(store: SqlStore) -> None:
    clean = validate_settings("Orders", {"rate_limit": "5/s", "breaker_threshold": 3},
                              BusinessOperation.declared_settings())
    guards = ItemGuards.from_settings("Orders", GuardSettings.from_validated(clean),
                                      store=store, clock=VirtualClock(), owner="d")
    assert guards.observers == [guards.limiter, guards.breaker]
    assert guards.may_claim is not None and guards.may_claim()


# -- the bucket ----------------------------------------------------------------------------

def takes(store: SqlStore, clock: VirtualClock, n: int, *, capacity: int = 5,
          per_second: float = 5.0) -> list[float]:
    return [round(store.rate_buckets.take(ITEM, capacity=capacity, per_second=per_second,
                                          now=clock.now()), 6) for _ in range(n)]


def test_a_full_bucket_gives_a_burst_of_n_then_one_slot_every_period_over_n(
        store: SqlStore) -> None:
    clock = VirtualClock()
    store.rate_buckets.ensure(ITEM, capacity=5, now=clock.now())
    assert takes(store, clock, 8) == [0, 0, 0, 0, 0, 0.2, 0.4, 0.6]


def test_reserved_slots_are_handed_out_in_order_as_time_passes(store: SqlStore) -> None:
    clock = VirtualClock()
    store.rate_buckets.ensure(ITEM, capacity=5, now=clock.now())
    takes(store, clock, 7)  # slots at 0 (×5), 0.2 and 0.4 are taken
    clock.advance(0.3)
    assert takes(store, clock, 2) == [0.3, 0.5]  # the next ones are at 0.6 and 0.8


def test_an_idle_bucket_refills_up_to_its_capacity_only(store: SqlStore) -> None:
    clock = VirtualClock()
    store.rate_buckets.ensure(ITEM, capacity=5, now=clock.now())
    takes(store, clock, 5)
    clock.advance(3600)
    assert takes(store, clock, 6) == [0, 0, 0, 0, 0, 0.2]


def test_a_missing_bucket_is_created_full(store: SqlStore) -> None:
    clock = VirtualClock()
    assert takes(store, clock, 3, capacity=2, per_second=1 / 60) == [0, 0, 60]


def test_n_per_period_holds_over_any_stretch_of_time(store: SqlStore) -> None:
    """Starts at the times the bucket gives: at most N + N·t/period within any t seconds."""
    clock = VirtualClock()
    store.rate_buckets.ensure(ITEM, capacity=5, now=clock.now())
    starts: list[float] = []
    for step in range(200):  # callers arrive every 0.05 s, faster than 5/s
        clock.advance_to(step * 0.05)
        wait = store.rate_buckets.take(ITEM, capacity=5, per_second=5.0, now=clock.now())
        starts.append(clock.monotonic() + wait)
    starts.sort()
    for i, first in enumerate(starts):
        for span in (0.5, 1.0, 3.0):
            within = sum(1 for s in starts[i:] if s < first + span - 1e-9)
            assert within <= 5 + 5 * span


# -- the limiter ---------------------------------------------------------------------------

def row(store: SqlStore, clock: VirtualClock) -> MessageRow:
    found = store.get_message(store.enqueue(target=ITEM, body_class=None, body="{}",
                                            now=clock.now()))
    assert found is not None
    return found


def test_two_daemons_share_one_bucket_and_wait_before_the_attempt(store: SqlStore) -> None:
    clock = VirtualClock()
    limit = RateLimit.parse("2/s")
    a = RateLimiter(ITEM, limit, store=store, clock=clock)
    b = RateLimiter(ITEM, limit, store=store, clock=clock)
    started = []
    for limiter in (a, b, a, b, a):
        limiter.before_attempt(row(store, clock), 1)  # the virtual sleep moves the clock
        started.append(clock.monotonic())
    # a, b at once (burst 2); then one slot each 0.5 s after the previous: the clock is
    # already at the last caller's slot when the next one asks
    assert started == [0, 0, 0.5, 1.0, 1.5]


def test_a_limiter_waiting_when_its_item_stops_holds_the_message_unsent(
        store: SqlStore) -> None:
    stop = threading.Event()
    clock = VirtualClock()
    limiter = RateLimiter(ITEM, RateLimit.parse("1/h"), store=store, clock=clock, stop=stop)
    limiter.before_attempt(row(store, clock), 1)
    stop.set()
    with pytest.raises(AttemptHeld) as held:
        limiter.before_attempt(row(store, clock), 1)
    assert held.value.until is None and "stopping" in str(held.value)
    assert clock.now() == clock.start + timedelta(0)  # it never slept


def test_after_a_wait_a_claim_taken_over_meanwhile_is_not_sent(store: SqlStore) -> None:
    clock = VirtualClock()
    limiter = RateLimiter(ITEM, RateLimit.parse("1/s"), store=store, clock=clock,
                          owner="daemon-A", lease_seconds=30)
    for _ in range(2):
        store.enqueue(target=ITEM, body_class=None, body="{}", now=clock.now())
    first = claim_one(store, ITEM, owner="daemon-A", now=clock.now(), lease_seconds=30)
    second = claim_one(store, ITEM, owner="daemon-A", now=clock.now(), lease_seconds=30)
    assert first is not None and second is not None
    limiter.before_attempt(first, 1)  # the burst: no wait, no confirmation needed
    store.release(second.id, token=second.claim_token)  # "another daemon took it over"
    claim_one(store, ITEM, owner="daemon-B", now=clock.now(), lease_seconds=30)
    with pytest.raises(ClaimLost):
        limiter.before_attempt(second, 1)  # it waited 1 s, then found its claim gone
