"""Properties of the retry loop over random settings and attempt durations (hypothesis).

A worker is simulated on plain numbers: attempt *k* starts at s_k, runs until the server
answers or its deadline passes, and ``decide`` says when attempt *k+1* starts.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ConnectFailed, HttpStatusError, ResponseTimeout
from engine.retry import RETRY_SETTINGS, Action, AttemptState, Decision, RetryPolicy
from engine.settings import validate_settings

LIMIT = 40  # attempts simulated at most (retry-forever policies never stop on their own)
FAST = settings(max_examples=150, deadline=None, database=None)

seconds = st.floats(min_value=0, max_value=50, allow_nan=False, allow_infinity=False)


@dataclass(frozen=True)
class Attempt:
    start: float
    end: float
    decision: Decision


@st.composite
def raw_settings(draw: st.DrawFn) -> dict:
    """A production ``[items.settings]`` table with the retry settings."""
    return {
        "retry_interval": draw(seconds),
        "failure_timeout": draw(st.one_of(st.just(-1), st.just(0), seconds)),
        "backoff": draw(st.sampled_from(["fixed", "exponential", "retry_after"])),
        "backoff_base": draw(st.floats(0, 5)),
        "backoff_multiplier": draw(st.floats(1, 3)),
        "backoff_max": draw(st.floats(0, 30)),
        "jitter": draw(st.one_of(st.just("full"), st.floats(0, 3))),
        "max_attempts": draw(st.integers(0, 6)),
        "strict_failure_timeout": draw(st.booleans()),
    }


errors = st.sampled_from([
    lambda: ResponseTimeout("response timeout"),  # outcome unknown
    lambda: ConnectFailed("connection refused"),  # not sent
    lambda: HttpStatusError("busy", code="503", status_code=503),  # answered, no header
    lambda: HttpStatusError("busy", code="429", status_code=429, headers={"Retry-After": "3"}),
])


def simulate(policy: RetryPolicy, *, first: float, response_timeout: float,
             server_times: list[float], make_error, seed: int) -> list[Attempt]:
    """Run attempts until the policy stops retrying (or LIMIT); every attempt fails."""
    rng, start, attempts = random.Random(seed), first, []
    for k in range(1, LIMIT + 1):
        deadline = policy.deadline(first_started=first, started=start,
                                   response_timeout=response_timeout)
        end = min(start + server_times[(k - 1) % len(server_times)], deadline)
        state = AttemptState(attempt=k, first_started=first, started=start, ended=end,
                             error=make_error())
        decision = policy.decide(state, retry_needed=True, rng=rng)
        attempts.append(Attempt(start, end, decision))
        if decision.action is not Action.RETRY:
            break
        start = decision.at
    return attempts


scenario = dict(
    raw=raw_settings(),
    first=st.floats(0, 1000),
    response_timeout=st.floats(0.001, 20),
    server_times=st.lists(seconds, min_size=1, max_size=5),
    make_error=errors,
    seed=st.integers(0, 2**32 - 1),
)


def load(raw: dict, **extra) -> RetryPolicy:
    return RetryPolicy.from_settings({**validate_settings("P", raw, RETRY_SETTINGS), **extra})


@FAST
@given(**scenario)
def test_attempts_never_overlap(raw, first, response_timeout, server_times, make_error, seed):
    attempts = simulate(load(raw), first=first, response_timeout=response_timeout,
                        server_times=server_times, make_error=make_error, seed=seed)
    for before, after in zip(attempts, attempts[1:]):
        assert after.start >= before.end
        assert after.start == before.decision.at


@FAST
@given(**scenario)
def test_no_attempt_starts_once_the_give_up_condition_held(
        raw, first, response_timeout, server_times, make_error, seed):
    policy = load(raw)
    attempts = simulate(policy, first=first, response_timeout=response_timeout,
                        server_times=server_times, make_error=make_error, seed=seed)
    for k, attempt in enumerate(attempts, start=1):
        timed_out = policy.failure_timeout != -1 and \
            attempt.end - first >= policy.failure_timeout
        counted_out = 0 < policy.max_attempts <= k
        if timed_out or counted_out:
            assert attempt.decision.action is Action.GIVE_UP
            assert attempt is attempts[-1]
    if policy.failure_timeout == 0:
        assert len(attempts) == 1
    if policy.max_attempts:
        assert len(attempts) <= policy.max_attempts


@FAST
@given(**scenario)
def test_fixed_backoff_spacing_is_max_of_end_and_start_plus_interval(
        raw, first, response_timeout, server_times, make_error, seed):
    policy = load({**raw, "backoff": "fixed"})
    attempts = simulate(policy, first=first, response_timeout=response_timeout,
                        server_times=server_times, make_error=make_error, seed=seed)
    for before, after in zip(attempts, attempts[1:]):
        assert after.start == max(before.end, before.start + policy.retry_interval)


@FAST
@given(**scenario)
def test_with_strict_nothing_runs_past_the_failure_budget(
        raw, first, response_timeout, server_times, make_error, seed):
    policy = load({**raw, "strict_failure_timeout": True})
    attempts = simulate(policy, first=first, response_timeout=response_timeout,
                        server_times=server_times, make_error=make_error, seed=seed)
    if policy.failure_timeout == -1:
        return
    budget_end = first + policy.failure_timeout
    assert all(a.end <= budget_end for a in attempts)
    assert all(a.start < budget_end for a in attempts[1:])


@FAST
@given(**scenario)
def test_a_retry_after_start_never_lies_past_the_failure_budget(
        raw, first, response_timeout, server_times, make_error, seed):
    policy = load({**raw, "backoff": "retry_after"})
    attempts = simulate(policy, first=first, response_timeout=response_timeout,
                        server_times=server_times, make_error=make_error, seed=seed)
    if policy.failure_timeout != -1:
        assert all(a.start <= first + policy.failure_timeout for a in attempts)


@FAST
@given(**scenario)
def test_not_idempotent_never_resends_an_unknown_outcome(
        raw, first, response_timeout, server_times, make_error, seed):
    policy = load(raw, idempotent=False)
    attempts = simulate(policy, first=first, response_timeout=response_timeout,
                        server_times=server_times, make_error=make_error, seed=seed)
    if isinstance(make_error(), ResponseTimeout):
        assert len(attempts) == 1


@FAST
@given(base=st.floats(0, 5), multiplier=st.floats(1, 3), cap=st.floats(0, 30),
       jitter=st.floats(0, 3), attempt=st.integers(1, 200), seed=st.integers(0, 2**32 - 1))
def test_exponential_delay_stays_within_its_window(base, multiplier, cap, jitter, attempt, seed):
    raw = {"backoff": "exponential", "backoff_base": base, "backoff_multiplier": multiplier,
           "backoff_max": cap, "jitter": jitter}
    backoff = load(raw).backoff
    delay = backoff.delay(attempt, random.Random(seed))
    low = min(base * multiplier ** min(attempt - 1, 1000), cap)
    assert low <= delay <= low + jitter + 1e-9
