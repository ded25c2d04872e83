"""Backoff strategies (seed 002): exponential with jitter, Retry-After, custom delay functions."""
from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta

import pytest

from engine.errors import ConfigurationError, HttpStatusError, ResponseTimeout
from engine.retry import (
    Action,
    AttemptState,
    ExponentialBackoff,
    FixedBackoff,
    FunctionBackoff,
    Reason,
    RetryAfterBackoff,
    RetryPolicy,
    backoff_from_settings,
    parse_retry_after,
)

NOW = datetime(2024, 1, 1, tzinfo=UTC)
SEEDS = range(200)


class EdgeRandom(random.Random):
    """A generator whose uniform() always returns the low (``high=False``) or high end."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self.high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self.high else a


LOW, HIGH = EdgeRandom(high=False), EdgeRandom(high=True)


def busy(retry_after=None, header="Retry-After"):
    headers = {} if retry_after is None else {header: retry_after}
    return HttpStatusError("429 Too Many Requests", code="429", status_code=429, headers=headers)


def failed(attempt=1, started=0.0, ended=0.0, error=None, first=0.0):
    return AttemptState(attempt=attempt, first_started=first, started=started, ended=ended,
                        error=error)


def delays(backoff, state, seeds=SEEDS):
    return [backoff.next_start(state, random.Random(seed)) - state.ended for seed in seeds]


# --- delay functions referenced as "tests.unit.test_backoff:<name>" -----------------------------

def three_seconds(attempt):
    return 3


def by_status(attempt, *, status_code, elapsed):
    return None if elapsed > 60 else (10 if status_code == 429 else 1) * attempt


def everything(attempt, **context):
    everything.seen = context  # type: ignore[attr-defined]
    return timedelta(milliseconds=250)


NOT_CALLABLE = 42


# --- fixed --------------------------------------------------------------------------------------

def test_fixed_backoff_starts_interval_after_the_previous_start_or_at_once_when_late():
    assert FixedBackoff(10).next_start(failed(started=20, ended=27)) == 30
    assert FixedBackoff(10).next_start(failed(started=20, ended=33)) == 33
    assert FixedBackoff(0).next_start(failed(started=20, ended=27)) == 27


# --- exponential ----------------------------------------------------------------------------------

def test_seed_002_base_half_a_second_with_a_jitter_window_of_1_5_gives_0_5_to_2_0():
    backoff = ExponentialBackoff(base=0.5, jitter=1.5)
    state = failed(ended=100)
    assert backoff.next_start(state, LOW) == 100.5
    assert backoff.next_start(state, HIGH) == 102.0
    spread = delays(backoff, state)
    assert all(0.5 <= d <= 2.0 for d in spread)
    assert max(spread) - min(spread) > 1.0  # the jitter really varies


def test_exponential_delay_doubles_per_attempt_until_the_cap():
    backoff = ExponentialBackoff(base=1, multiplier=2, cap=10)
    assert [backoff.raw_delay(k) for k in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert backoff.next_start(failed(attempt=3, started=5, ended=9)) == 13  # from the end


def test_exponential_delay_of_a_huge_attempt_number_is_the_cap_not_an_overflow():
    assert ExponentialBackoff(base=1, cap=60).raw_delay(100_000) == 60
    assert ExponentialBackoff(base=0, cap=60).raw_delay(100_000) == 0


def test_full_jitter_draws_the_whole_delay_from_zero_to_the_delay():
    backoff = ExponentialBackoff(base=1, multiplier=2, jitter="full")
    state = failed(attempt=3, ended=0)
    assert backoff.next_start(state, LOW) == 0
    assert backoff.next_start(state, HIGH) == 4
    assert all(0 <= d <= 4 for d in delays(backoff, state))


def test_the_same_seed_gives_the_same_delays():
    backoff = ExponentialBackoff(jitter=3)
    assert delays(backoff, failed()) == delays(backoff, failed())


@pytest.mark.parametrize("kwargs", [
    {"jitter": "half"},  # the only word is "full"
    {"jitter": -1},  # no negative window
    {"base": -0.5},  # no negative delay
    {"cap": -1},  # no negative cap
])
def test_exponential_backoff_refuses_meaningless_parameters(kwargs):
    with pytest.raises(ValueError):
        ExponentialBackoff(**kwargs)


def test_strategies_are_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FixedBackoff(1).interval = 2  # type: ignore[misc]


# --- Retry-After
# -----------------------------------------------------------------------------------

def test_seed_002_retry_after_2_seconds_with_a_jitter_window_of_1_5_gives_2_0_to_3_5():
    backoff = RetryAfterBackoff(jitter=1.5, now=lambda: NOW)
    state = failed(ended=10, error=busy("2"))
    assert backoff.next_start(state, LOW) == 12.0
    assert backoff.next_start(state, HIGH) == 13.5
    assert all(2.0 <= d <= 3.5 for d in delays(backoff, state))


def test_the_retry_after_header_is_found_whatever_its_case():
    backoff = RetryAfterBackoff(now=lambda: NOW)
    assert backoff.retry_after(busy("7", header="retry-after")) == 7
    assert backoff.retry_after(busy("7", header="RETRY-AFTER")) == 7


def test_retry_after_as_an_http_date_counts_from_the_injected_wall_clock():
    backoff = RetryAfterBackoff(now=lambda: NOW)
    assert backoff.retry_after(busy("Mon, 01 Jan 2024 00:00:30 GMT")) == 30
    assert backoff.retry_after(busy("Sun, 31 Dec 2023 23:59:00 GMT")) == 0  # already past


def test_retry_after_in_milliseconds():
    backoff = RetryAfterBackoff(unit="milliseconds", now=lambda: NOW)
    assert backoff.retry_after(busy("2000")) == 2.0
    assert backoff.next_start(failed(ended=1, error=busy("1500")), LOW) == 2.5


@pytest.mark.parametrize(("value", "seconds"), [
    ("2", 2.0),  # integer seconds
    (" 1.5 ", 1.5),  # fractional, padded
    ("-3", None),  # negative: unusable
    ("soon", None),  # neither number nor date
    ("nan", None),  # not a real number
])
def test_parse_retry_after(value, seconds):
    assert parse_retry_after(value, now=NOW) == seconds


def test_without_a_usable_retry_after_header_the_exponential_fallback_applies():
    backoff = RetryAfterBackoff(fallback=ExponentialBackoff(base=4), now=lambda: NOW)
    assert backoff.next_start(failed(ended=1, error=busy()), LOW) == 5
    assert backoff.next_start(failed(ended=1, error=busy("soon")), LOW) == 5
    assert backoff.next_start(failed(ended=1, error=ResponseTimeout("t")), LOW) == 5
    assert backoff.next_start(failed(ended=1, error=None), LOW) == 5


def test_a_retry_after_beyond_the_failure_budget_gives_up_at_once():
    policy = RetryPolicy(failure_timeout=30, backoff=RetryAfterBackoff(now=lambda: NOW))
    decision = policy.decide(failed(started=20, ended=25, error=busy("10")), retry_needed=True)
    assert (decision.action, decision.reason) == (Action.GIVE_UP, Reason.FAILURE_TIMEOUT)
    assert "Retry-After of 10 seconds" in decision.text
    assert "5 seconds left" in decision.text


def test_a_retry_after_within_the_failure_budget_is_honoured():
    policy = RetryPolicy(failure_timeout=30, backoff=RetryAfterBackoff(now=lambda: NOW))
    decision = policy.decide(failed(started=20, ended=25, error=busy("5")), retry_needed=True)
    assert (decision.action, decision.at) == (Action.RETRY, 30)


def test_jitter_never_pushes_a_retry_after_start_past_the_failure_budget():
    backoff = RetryAfterBackoff(jitter=10, now=lambda: NOW)
    policy = RetryPolicy(failure_timeout=30, backoff=backoff)
    decision = policy.decide(failed(ended=25, error=busy("2")), retry_needed=True, rng=HIGH)
    assert decision.at == 30


def test_with_retry_forever_any_retry_after_up_to_backoff_max_is_honoured():
    hour = RetryAfterBackoff(fallback=ExponentialBackoff(cap=3600), now=lambda: NOW)
    policy = RetryPolicy(failure_timeout=-1, backoff=hour)
    decision = policy.decide(failed(ended=25, error=busy("3600")), retry_needed=True)
    assert decision.at == 3625
    capped = RetryPolicy(failure_timeout=-1, backoff=RetryAfterBackoff(now=lambda: NOW))
    assert capped.decide(failed(ended=25, error=busy("3600")), retry_needed=True).at == 85


# --- custom delay functions --------------------------------------------------------------------

def test_a_function_named_module_colon_function_is_resolved_and_called():
    backoff = backoff_from_settings({"backoff": "tests.unit.test_backoff:three_seconds"})
    assert backoff == FunctionBackoff(three_seconds)
    assert backoff.next_start(failed(ended=4)) == 7


def test_the_function_gets_only_the_keywords_it_declares():
    backoff = FunctionBackoff(by_status)
    assert backoff.next_start(failed(attempt=2, ended=5, error=busy())) == 25
    assert backoff.next_start(failed(attempt=2, ended=5, error=ResponseTimeout("t"))) == 7
    assert backoff.next_start(failed(attempt=2, ended=61, error=busy())) is None


def test_a_function_taking_any_keywords_gets_them_all_and_may_return_a_timedelta():
    error = busy("9")
    backoff = FunctionBackoff(everything)
    assert backoff.next_start(failed(started=1, ended=2, error=error, first=0.5)) == 2.25
    assert everything.seen == {"elapsed": 1.5, "error": error, "status_code": 429,
                               "headers": {"Retry-After": "9"}}


def test_a_negative_delay_counts_as_zero_and_a_non_number_is_refused():
    assert FunctionBackoff(lambda attempt: -5).next_start(failed(ended=3)) == 3
    with pytest.raises(TypeError, match="expected seconds or None"):
        FunctionBackoff(lambda attempt: "soon").next_start(failed())


@pytest.mark.parametrize(("spec", "words"), [
    ("no_such_module_xyz:get_delay", ["'backoff'", "cannot import", "no_such_module_xyz"]),
    ("tests.unit.test_backoff:missing", ["'backoff'", "no attribute", "missing"]),
    ("tests.unit.test_backoff:NOT_CALLABLE", ["'backoff'", "not callable"]),
    ("tests.unit.test_backoff:", ["'backoff'", "module:function"]),  # the function part is empty
    ("gradual", ["'backoff'", "'fixed'", "'retry_after'"]),  # unknown strategy name
])
def test_a_backoff_that_cannot_be_resolved_is_refused_naming_the_setting(spec, words):
    with pytest.raises(ConfigurationError) as info:
        backoff_from_settings({"backoff": spec})
    for word in words:
        assert word in str(info.value)


def test_backoff_from_settings_shorthands():
    assert backoff_from_settings({}) == FixedBackoff(5.0)
    assert backoff_from_settings({"retry_interval": 10}) == FixedBackoff(10)
    assert backoff_from_settings({"backoff": "exponential", "backoff_base": 0.5,
                                  "backoff_max": 8, "jitter": "full"}) == ExponentialBackoff(
        base=0.5, cap=8, jitter="full")
    mine = FixedBackoff(3)
    assert backoff_from_settings({"backoff": mine}) is mine
