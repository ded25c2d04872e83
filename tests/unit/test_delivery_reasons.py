"""The delivery policy acts on the retry policy's reason, never on its text: the
``on_failure_timeout`` hook runs for each way the FailureTimeout ends a delivery and for no
other give-up, and a judgement carries the reason it follows from."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engine.delivery.attempt_runner import AttemptOutcome
from engine.delivery.policy import DeliveryPolicy
from engine.errors import HttpStatusError, RemoteFault, ResponseTimeout
from engine.host import BusinessOperation
from engine.retry import Action, Reason, ReplyCodeActions, RetryAfterBackoff, RetryPolicy
from engine.settings import validate_settings

NOW = datetime(2024, 1, 1, tzinfo=UTC)


class HookOperation(BusinessOperation):
    """Records each call of its hook, which answers with a fallback response."""

    def on_message(self, request: Any) -> Any:
        return None

    def on_failure_timeout(self, request: Any) -> Any:
        self.hooked = getattr(self, "hooked", 0) + 1
        return {"fallback": True}


def outcome(number: int, started: float, ended: float, error: BaseException,
            **asked: bool) -> AttemptOutcome:
    return AttemptOutcome(number=number, attempt_id=number, started=started, ended=ended,
                          started_at=NOW, ended_at=NOW, error=error, **asked)


def retry_after(seconds: str) -> HttpStatusError:
    return HttpStatusError("HTTP 503", code="503", status_code=503, retryable=True,
                           headers={"Retry-After": seconds})


CASES = [
    # the budget has run out
    (RetryPolicy(retry_interval=10, failure_timeout=30), outcome(4, 30, 37, ResponseTimeout("t")),
     Reason.FAILURE_TIMEOUT),
    # strict: the next attempt would start at the budget's end
    (RetryPolicy(retry_interval=10, failure_timeout=30, strict=True),
     outcome(3, 20, 27, ResponseTimeout("t")), Reason.FAILURE_TIMEOUT),
    # the server asks for a wait longer than what is left of the budget
    (RetryPolicy(failure_timeout=30, backoff=RetryAfterBackoff(now=lambda: NOW)),
     outcome(2, 20, 25, retry_after("10")), Reason.FAILURE_TIMEOUT),
    # the other give-ups: the hook is not theirs
    (RetryPolicy(failure_timeout=-1, max_attempts=2), outcome(2, 10, 17, ResponseTimeout("t")),
     Reason.MAX_ATTEMPTS),
    (RetryPolicy(), outcome(1, 0, 1, RemoteFault("no")), Reason.NOT_RETRYABLE),
    (RetryPolicy(idempotent=False), outcome(1, 0, 7, ResponseTimeout("t")),
     Reason.OUTCOME_UNKNOWN),
]


@pytest.mark.parametrize(("policy", "attempt", "reason"), CASES)
def test_the_failure_timeout_hook_runs_on_the_failure_timeout_reason_only(
        policy: RetryPolicy, attempt: AttemptOutcome, reason: Reason) -> None:
    host = HookOperation("Item", validate_settings("Item", {},
                                                   HookOperation.declared_settings()))
    judged = DeliveryPolicy(policy, ReplyCodeActions.parse("E=F")).judge(
        host, None, attempt, first_started=0.0)
    if reason is Reason.FAILURE_TIMEOUT:
        assert (judged.action, judged.response, judged.from_hook) == (
            Action.COMPLETE, {"fallback": True}, True)
        assert host.hooked == 1
    else:
        assert (judged.action, judged.reason) == (Action.GIVE_UP, reason)
        assert judged.text.startswith("giving up: ")
        assert not hasattr(host, "hooked")


@pytest.mark.parametrize(("asked", "rules", "reason"), [
    ({"suspend_asked": True}, "E=F", Reason.ASKED),  # the operation set suspend_message
    ({}, "E=S", Reason.REPLY_CODE),  # reply code action S
])
def test_a_suspension_carries_who_asked_for_it(asked: dict[str, bool], rules: str,
                                               reason: Reason) -> None:
    host = HookOperation("Item", validate_settings("Item", {},
                                                   HookOperation.declared_settings()))
    judged = DeliveryPolicy(RetryPolicy(), ReplyCodeActions.parse(rules)).judge(
        host, None, outcome(1, 0, 1, RemoteFault("no"), **asked), first_started=0.0)
    assert (judged.action, judged.reason) == (Action.SUSPEND, reason)
    assert judged.text == "suspended after attempt 1: RemoteFault: no"
