"""A hostile ``Retry-After`` (issue 22, finding 5; docs/security.md "Values from servers are data,
never a crash"), on the virtual clock through the real daemon: a date in the past or a value
below ``backoff_base`` waits ``backoff_base``; a value above ``backoff_max`` waits
``backoff_max``; no value raises in the worker."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engine.clock import VirtualClock
from engine.errors import HttpStatusError
from engine.retry import Action, AttemptState, RetryPolicy, parse_retry_after
from engine.retry.backoff import FunctionBackoff
from engine.settings import validate_settings
from engine.store.sql import SqlStore
from engine.testing import (
    ServerBehaviour,
    SimulatedOperation,
    SimulatedServerAdapter,
    VirtualDaemon,
)

# backoff_base 2, backoff_max 10: the bounds every Retry-After is held to here
BOUNDED = {"backoff": "retry_after", "backoff_base": 2, "backoff_max": 10,
           "response_timeout": 5, "retry_interval": 0}

PAST_DATE = "Mon, 01 Jan 2001 00:00:00 GMT"
FAR_DATE = "Fri, 31 Dec 9999 23:59:59 GMT"
HUGE = ["99999999999", "1e308", "1.7976931348623157e308", FAR_DATE,
        "99999999999999999999999999999999999999999999"]
BELOW_BASE = [PAST_DATE, "0", "0.5", "+0.0", "Thu, 01 Jan 1970 00:00:00 GMT"]
GARBAGE = ["garbage", "", "-1", "-1e308", "nan", "inf", "-inf", "1e999", "0x10",
           "Fri, 31 Dec 99999 23:59:59 GMT", "Mon, 99 Foo 2024 99:99:99 GMT", "\x00", "\ud800",
           "9" * 5000, "Sun, 06 Nov 1994 08:49:37 +9999", "1_000_000_000_000", "-0", "٣"]


def daemon(store: SqlStore, retry_after: str, **settings: Any) -> VirtualDaemon:
    clean = validate_settings("Busy", {**BOUNDED, **settings},
                              SimulatedOperation.declared_settings())

    def adapter(clock: VirtualClock) -> SimulatedServerAdapter:
        return SimulatedServerAdapter(clean, behaviour=ServerBehaviour(
            status=503, retry_after=retry_after), clock=clock)
    return VirtualDaemon.for_item("Busy", SimulatedOperation, {**BOUNDED, **settings},
                                  adapter=adapter, store=store)


def starts(d: VirtualDaemon, message_id: int) -> list[float]:
    return [(a.started_at - d.clock.start).total_seconds() for a in d.store.attempts(message_id)]


def deliver(store: SqlStore, retry_after: str, **settings: Any) -> tuple[VirtualDaemon, int]:
    d = daemon(store, retry_after, **settings)
    mid = d.send("Busy", {"text": "hi"})
    d.run()
    return d, mid


@pytest.mark.parametrize("retry_after", BELOW_BASE)
def test_a_retry_after_in_the_past_or_below_backoff_base_waits_backoff_base(
        store: SqlStore, retry_after: str) -> None:
    d, mid = deliver(store, retry_after, max_attempts=4, failure_timeout=-1)
    assert starts(d, mid) == [0, 2, 4, 6]
    assert store.get_message(mid).status == "Error"
    d.stop()


@pytest.mark.parametrize("retry_after", HUGE)
def test_a_retry_after_above_backoff_max_waits_backoff_max(store: SqlStore,
                                                           retry_after: str) -> None:
    d, mid = deliver(store, retry_after, max_attempts=3, failure_timeout=-1)
    assert starts(d, mid) == [0, 10, 20]
    row = store.get_message(mid)
    assert row.status == "Error" and "max attempts (3) reached" in row.error_text
    d.stop()


def test_a_huge_retry_after_within_a_failure_timeout_retries_at_backoff_max(
        store: SqlStore) -> None:
    """Bounded to backoff_max, a huge value fits the budget: no give-up at once."""
    d, mid = deliver(store, "99999999999", failure_timeout=30)
    assert starts(d, mid) == [0, 10, 20, 30]
    assert "FailureTimeout of 30 seconds exceeded" in store.get_message(mid).error_text
    d.stop()


def test_a_bounded_retry_after_beyond_the_budget_still_gives_up_at_once_naming_both_values(
        store: SqlStore) -> None:
    d, mid = deliver(store, "99999999999", failure_timeout=5)
    assert starts(d, mid) == [0]
    text = store.get_message(mid).error_text
    assert "Retry-After of 10 seconds (the server asked for 1e+11" in text
    assert "5 seconds left" in text
    d.stop()


@pytest.mark.parametrize("retry_after", HUGE)
def test_in_requeue_mode_a_huge_retry_after_parks_the_message_for_backoff_max(
        store: SqlStore, retry_after: str) -> None:
    d = daemon(store, retry_after, retry_mode="requeue", failure_timeout=-1)
    mid = d.send("Busy", {"text": "hi"})
    d.run_until(1)
    row = store.get_message(mid)
    assert row.status == "Queued" and row.retry_needed
    assert d.at(row.next_attempt_at) == 10
    d.stop()


@pytest.mark.parametrize("retry_after", GARBAGE)
def test_an_unusable_retry_after_falls_back_to_the_exponential_delays(
        store: SqlStore, retry_after: str) -> None:
    d, mid = deliver(store, retry_after, max_attempts=4, failure_timeout=-1)
    assert starts(d, mid) == [0, 2, 6, 14]  # base 2: 2, 4, 8 (max 10)
    d.stop()


@pytest.mark.parametrize("value", HUGE + BELOW_BASE + GARBAGE)
@pytest.mark.parametrize("unit", ["seconds", "milliseconds"])
def test_parse_retry_after_never_raises_and_is_finite_or_none(value: str, unit: str) -> None:
    seconds = parse_retry_after(value, unit=unit, now=datetime.now(UTC))
    assert seconds is None or 0 <= seconds < float("inf")


def _state(error: BaseException | None = None) -> AttemptState:
    return AttemptState(attempt=1, first_started=0, started=0, ended=5, error=error)


@pytest.mark.parametrize("returned", [1e308, float("inf"), 10 ** 400, 99999999999])
def test_a_delay_function_is_capped_at_backoff_max_too(returned: Any) -> None:
    policy = RetryPolicy(failure_timeout=-1, backoff=FunctionBackoff(lambda a: returned, cap=10))
    decision = policy.decide(_state(), retry_needed=True)
    assert (decision.action, decision.at) == (Action.RETRY, 15)


def test_a_fixed_interval_past_any_clock_waits_at_most_a_year() -> None:
    policy = RetryPolicy(failure_timeout=-1, retry_interval=1e300)
    decision = policy.decide(_state(HttpStatusError("busy", status_code=503)), retry_needed=True)
    assert decision.at == 5 + 366 * 24 * 3600
