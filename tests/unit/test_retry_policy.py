"""RetryPolicy.decide / deadline / from_settings, driven on plain numbers (no clock, no sleeps)."""
from __future__ import annotations

import dataclasses
import random

import pytest

from engine.errors import (
    CRASH_TEXT,
    ConfigurationError,
    ConnectFailed,
    ConnectionReset,
    HttpStatusError,
    OutcomeUnknown,
    ResponseTimeout,
)
from engine.retry import (
    RETRY_SETTINGS,
    Action,
    AttemptState,
    Decision,
    ExponentialBackoff,
    FixedBackoff,
    FunctionBackoff,
    Reason,
    RetryAfterBackoff,
    RetryPolicy,
)
from engine.retry.policy import INTERRUPTED_REASON
from engine.settings import validate_settings

FAILURE_TIMEOUT_30 = "FailureTimeout of 30 seconds exceeded"


def run_timeline(policy, *, attempt_time, error_factory=lambda: ResponseTimeout("timed out"),
                 limit=100):
    """Drive ``policy`` like a worker would: every attempt fails after ``attempt_time`` seconds.

    Returns the attempt start times, the final decision and the time it was taken.
    """
    starts, start, rng = [], 0.0, random.Random(7)
    for attempt in range(1, limit + 1):
        starts.append(start)
        ended = start + attempt_time
        state = AttemptState(attempt=attempt, first_started=0.0, started=start, ended=ended,
                             error=error_factory())
        decision = policy.decide(state, retry_needed=True, rng=rng)
        if decision.action is not Action.RETRY:
            return starts, decision, ended
        start = decision.at
    return starts, None, start


def state(attempt=1, first=0.0, started=0.0, ended=1.0, error=None):
    return AttemptState(attempt=attempt, first_started=first, started=started, ended=ended,
                        error=error)


# --- the seed timelines -------------------------------------------------------------------

def test_the_seed_timeline_starts_at_0_10_20_30_and_gives_up_at_37():
    policy = RetryPolicy(retry_interval=10, failure_timeout=30)
    starts, decision, ended = run_timeline(policy, attempt_time=7)  # response_timeout 7
    assert starts == [0, 10, 20, 30]
    assert decision.action is Action.GIVE_UP
    assert ended == 37
    assert decision.reason is Reason.FAILURE_TIMEOUT
    assert FAILURE_TIMEOUT_30 in decision.text
    assert decision.at is None


def test_seed_003_idempotent_with_no_interval_retries_at_0_10_20_30_and_gives_up_at_40():
    policy = RetryPolicy(retry_interval=0, failure_timeout=35)
    starts, decision, ended = run_timeline(policy, attempt_time=10)
    assert starts == [0, 10, 20, 30]
    assert (decision.action, ended) == (Action.GIVE_UP, 40)
    assert decision.reason is Reason.FAILURE_TIMEOUT
    assert "FailureTimeout of 35 seconds exceeded" in decision.text


def test_seed_003_not_idempotent_gives_up_after_one_timed_out_attempt():
    policy = RetryPolicy(retry_interval=0, failure_timeout=35, idempotent=False)
    starts, decision, ended = run_timeline(policy, attempt_time=10)
    assert starts == [0] and ended == 10
    assert (decision.action, decision.reason) == (Action.GIVE_UP, Reason.OUTCOME_UNKNOWN)
    assert "may have been processed" in decision.text
    assert "not idempotent" in decision.text


def test_not_idempotent_suspends_an_unknown_outcome_when_configured_to():
    policy = RetryPolicy(idempotent=False, on_unknown_outcome="suspend")
    decision = policy.decide(state(error=ConnectionReset("reset")), retry_needed=True)
    assert (decision.action, decision.reason) == (Action.SUSPEND, Reason.OUTCOME_UNKNOWN)
    assert "may have been processed" in decision.text


@pytest.mark.parametrize("on_unknown_outcome", ["error", "suspend"])
def test_not_idempotent_always_suspends_an_attempt_its_daemon_left_in_flight(on_unknown_outcome):
    policy = RetryPolicy(idempotent=False, on_unknown_outcome=on_unknown_outcome)
    decision = policy.decide(state(error=OutcomeUnknown(CRASH_TEXT)), retry_needed=True,
                             interrupted=True)
    assert (decision.action, decision.reason) == (Action.SUSPEND, Reason.INTERRUPTED)
    assert decision.text == INTERRUPTED_REASON


def test_idempotent_retries_an_attempt_its_daemon_left_in_flight():
    policy = RetryPolicy(retry_interval=10, failure_timeout=30)
    decision = policy.decide(state(error=OutcomeUnknown(CRASH_TEXT)), retry_needed=True,
                             interrupted=True)
    assert decision == Decision(Action.RETRY, at=10.0)


def test_not_idempotent_still_retries_a_request_that_was_never_sent():
    policy = RetryPolicy(retry_interval=10, failure_timeout=30, idempotent=False)
    decision = policy.decide(state(error=ConnectFailed("refused")), retry_needed=True)
    assert decision == Decision(Action.RETRY, at=10.0)


def test_not_idempotent_retries_an_answered_error():
    policy = RetryPolicy(idempotent=False)
    error = HttpStatusError("busy", code="503", status_code=503)
    assert policy.decide(state(error=error), retry_needed=True).action is Action.RETRY


# --- the give-up rules ----------------------------------------------------------------------

def test_without_the_retry_needed_flag_it_gives_up_as_not_retryable():
    decision = RetryPolicy().decide(state(), retry_needed=False)
    assert decision == Decision(Action.GIVE_UP, reason=Reason.NOT_RETRYABLE, text="not retryable")


def test_not_retryable_wins_over_an_unknown_outcome_suspend():
    policy = RetryPolicy(idempotent=False, on_unknown_outcome="suspend")
    decision = policy.decide(state(error=ResponseTimeout("t")), retry_needed=False)
    assert decision.action is Action.GIVE_UP


def test_failure_timeout_0_allows_a_single_attempt():
    starts, decision, _ = run_timeline(RetryPolicy(failure_timeout=0), attempt_time=0.001)
    assert starts == [0]
    assert decision.reason is Reason.FAILURE_TIMEOUT
    assert "FailureTimeout of 0 seconds exceeded" in decision.text


def test_failure_timeout_0_gives_up_even_after_an_instant_failure():
    decision = RetryPolicy(failure_timeout=0).decide(state(ended=0.0), retry_needed=True)
    assert decision.action is Action.GIVE_UP


def test_failure_timeout_minus_1_retries_forever():
    policy = RetryPolicy(retry_interval=10, failure_timeout=-1)
    starts, decision, _ = run_timeline(policy, attempt_time=7, limit=500)
    assert decision is None  # still retrying after 500 attempts
    assert starts[-1] == 4990
    late = state(attempt=10**6, started=10**9, ended=10**9 + 7)
    assert policy.decide(late, retry_needed=True).at == 10**9 + 10


def test_max_attempts_stops_after_that_many_attempts():
    policy = RetryPolicy(retry_interval=1, failure_timeout=-1, max_attempts=3)
    starts, decision, _ = run_timeline(policy, attempt_time=0.5)
    assert starts == [0, 1, 2]
    assert decision.reason is Reason.MAX_ATTEMPTS
    assert decision.text == "max attempts (3) reached"


def test_max_attempts_is_checked_before_the_failure_timeout():
    policy = RetryPolicy(failure_timeout=1, max_attempts=1)
    assert policy.decide(state(ended=5), retry_needed=True).text.startswith("max attempts (1)")


@pytest.mark.parametrize(("failure_timeout", "text"), [
    (30.0, "FailureTimeout of 30 seconds exceeded"),  # a whole number prints without ".0"
    (3.5, "FailureTimeout of 3.5 seconds exceeded"),  # a fraction keeps its digits
])
def test_the_failure_timeout_reason_formats_the_number_compactly(failure_timeout, text):
    decision = RetryPolicy(failure_timeout=failure_timeout).decide(
        state(ended=100), retry_needed=True)
    assert text in decision.text


def test_a_retry_is_possible_right_up_to_the_failure_timeout():
    policy = RetryPolicy(retry_interval=10, failure_timeout=30)
    assert policy.decide(state(ended=29.999), retry_needed=True).action is Action.RETRY
    assert policy.decide(state(ended=30.0), retry_needed=True).action is Action.GIVE_UP


def test_a_delay_function_returning_none_gives_up():
    policy = RetryPolicy(backoff=FunctionBackoff(lambda attempt: None))
    decision = policy.decide(state(), retry_needed=True)
    assert decision == Decision(Action.GIVE_UP, reason=Reason.DELAY_FUNCTION,
                                text="the delay function gave up")


def test_fixed_interval_runs_from_the_start_of_the_previous_attempt():
    policy = RetryPolicy(retry_interval=10, failure_timeout=-1)
    assert policy.decide(state(started=5, ended=8), retry_needed=True).at == 15
    assert policy.decide(state(started=5, ended=18), retry_needed=True).at == 18  # late: at once


def test_a_retry_never_starts_before_the_failed_attempt_ended():
    class Backwards:
        def next_start(self, state, rng=None):
            return state.started - 100

    decision = RetryPolicy(backoff=Backwards()).decide(state(ended=3), retry_needed=True)
    assert decision.at == 3


def test_the_default_backoff_follows_retry_interval():
    assert RetryPolicy(retry_interval=10).backoff == FixedBackoff(10)
    assert RetryPolicy().backoff == FixedBackoff(5.0)


# --- strict_failure_timeout -------------------------------------------------------------------

def test_strict_clips_the_deadline_to_the_failure_budget():
    policy = RetryPolicy(failure_timeout=30, strict=True)
    assert policy.deadline(first_started=0, started=25, response_timeout=7) == 30
    assert policy.deadline(first_started=0, started=10, response_timeout=7) == 17


def test_without_strict_the_deadline_is_the_full_response_timeout():
    policy = RetryPolicy(failure_timeout=30)
    assert policy.deadline(first_started=0, started=25, response_timeout=7) == 32


def test_strict_with_retry_forever_never_clips():
    policy = RetryPolicy(failure_timeout=-1, strict=True)
    assert policy.deadline(first_started=0, started=1000, response_timeout=7) == 1007


def test_strict_refuses_to_start_an_attempt_after_the_budget():
    policy = RetryPolicy(retry_interval=10, failure_timeout=25, strict=True)
    starts, decision, ended = run_timeline(policy, attempt_time=1)
    assert starts == [0, 10, 20]
    assert ended == 21
    assert decision.reason is Reason.FAILURE_TIMEOUT
    assert "FailureTimeout of 25 seconds exceeded" in decision.text


def test_without_strict_the_same_timeline_starts_a_fourth_attempt_after_the_budget():
    policy = RetryPolicy(retry_interval=10, failure_timeout=25)
    starts, _, _ = run_timeline(policy, attempt_time=1)
    assert starts == [0, 10, 20, 30]


def test_strict_refuses_an_attempt_that_would_start_exactly_at_the_budget():
    policy = RetryPolicy(retry_interval=10, failure_timeout=30, strict=True)
    decision = policy.decide(state(attempt=3, started=20, ended=27), retry_needed=True)
    assert (decision.action, decision.reason) == (Action.GIVE_UP, Reason.FAILURE_TIMEOUT)
    assert FAILURE_TIMEOUT_30 in decision.text


# --- immutability and validation ---------------------------------------------------------------

def test_the_policy_is_immutable_and_new_returns_a_changed_copy():
    policy = RetryPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.retry_interval = 1  # type: ignore[misc]
    changed = policy.new(max_attempts=4)
    assert (policy.max_attempts, changed.max_attempts) == (0, 4)


@pytest.mark.parametrize("kwargs", [
    {"failure_timeout": -2},  # only -1 is allowed below 0
    {"retry_interval": -1},  # no negative interval
    {"max_attempts": -1},  # 0 is unlimited, negatives mean nothing
    {"on_unknown_outcome": "ignore"},  # error or suspend only
])
def test_a_policy_refuses_values_that_mean_nothing(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_attempt_numbers_start_at_1():
    with pytest.raises(ValueError):
        state(attempt=0)


# --- from_settings and RETRY_SETTINGS ---------------------------------------------------------

def load(**raw):
    return RetryPolicy.from_settings(validate_settings("Payments", raw, RETRY_SETTINGS))


def test_from_settings_with_nothing_set_gives_the_defaults():
    assert load() == RetryPolicy()
    assert RetryPolicy.from_settings({}) == RetryPolicy()


def test_from_settings_reads_every_retry_setting():
    policy = RetryPolicy.from_settings({
        **validate_settings("P", {"RetryInterval": 10, "FailureTimeout": 30, "max_attempts": 4,
                                  "strict_failure_timeout": True}, RETRY_SETTINGS),
        "idempotent": False, "on_unknown_outcome": "suspend"})
    assert policy == RetryPolicy(retry_interval=10, failure_timeout=30, max_attempts=4,
                                 strict=True, idempotent=False, on_unknown_outcome="suspend")


def test_from_settings_builds_the_named_backoff():
    policy = load(backoff="retry_after", backoff_base=0.5, jitter=1.5,
                  retry_after_unit="milliseconds")
    assert isinstance(policy.backoff, RetryAfterBackoff)
    assert policy.backoff.unit == "milliseconds"
    assert policy.backoff.fallback == ExponentialBackoff(base=0.5, jitter=1.5)


def test_failure_timeout_minus_1_is_accepted_and_minus_2_refused():
    assert load(failure_timeout=-1).failure_timeout == -1
    with pytest.raises(ConfigurationError, match="failure_timeout"):
        load(failure_timeout=-2)


@pytest.mark.parametrize(("raw", "words"), [
    ({"backoff": "linear"}, ["'backoff'", "'exponential'", "module:function"]),  # unknown name
    ({"backoff": "no_such_module_xyz:f"}, ["'backoff'", "no_such_module_xyz"]),  # bad module
    ({"jitter": "half"}, ["'jitter'", "'full'"]),  # only "full" as a string
    ({"retry_after_unit": "minutes"}, ["'retry_after_unit'", "'milliseconds'"]),  # not a unit
    ({"max_attempts": 2.5}, ["'max_attempts'", "integer"]),  # a count
    ({"reply_code_actions": "E=R,E#=F"}, ["'reply_code_actions'", "character 7"]),  # bad syntax
])
def test_wrong_retry_settings_are_refused_naming_the_item_and_key(raw, words):
    with pytest.raises(ConfigurationError) as info:
        load(**raw)
    text = str(info.value)
    assert "'Payments'" in text
    for word in words:
        assert word in text


def test_reply_code_actions_is_declared_with_the_ensemble_default():
    settings = validate_settings("P", {}, RETRY_SETTINGS)
    assert settings["reply_code_actions"] == "E=F"
    assert validate_settings("P", {"ReplyCodeActions": "E#503=R"},
                             RETRY_SETTINGS)["reply_code_actions"] == "E#503=R"
