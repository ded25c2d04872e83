"""What follows an attempt (docs/retries.md): :class:`DeliveryPolicy` decides; the worker acts."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from engine.delivery.attempt_runner import AttemptOutcome, error_text
from engine.errors import AdapterError, Retry
from engine.host import BusinessOperation
from engine.retry import Action, AttemptState, Decision, Reason, ReplyCodeActions, RetryPolicy
from engine.retry.reply_codes import Actions

__all__ = ["DeliveryPolicy", "Judgement"]


@dataclass(frozen=True, kw_only=True)
class Judgement:
    """What follows an attempt, and what the worker needs to carry it out and report it."""

    action: Action
    at: float | None = None  # RETRY: monotonic start of the next attempt
    reason: Reason | None = None  # GIVE_UP / SUSPEND / DISABLE: why
    text: str = ""  # GIVE_UP / SUSPEND: the message's error text; DISABLE: the reason
    response: Any = None  # COMPLETE: the response to store
    attempt_open: bool = False  # COMPLETE: the attempt is a success still to be ended
    from_hook: bool = False  # COMPLETE: on_failure_timeout answered
    warn: bool = False  # reply code action W
    first_failure: bool = False  # attempt 1 failed: rule 6's first Error event
    unexpected: BaseException | None = None  # an error of the operation's own code
    decided: bool = False  # the retry policy decided (alerts follow such failures)


class DeliveryPolicy:
    """The item's reply code actions and retry policy, applied to one attempt's outcome."""

    def __init__(self, policy: RetryPolicy, reply_codes: ReplyCodeActions, *,
                 rng: random.Random | None = None) -> None:
        self.policy = policy
        self.reply_codes = reply_codes
        self.rng = rng or random.Random()

    def judge(self, host: BusinessOperation, request: Any, outcome: AttemptOutcome,
              first_started: float) -> Judgement:
        """What follows ``outcome``; may call ``host.on_failure_timeout``."""
        if not outcome.failed:
            return Judgement(action=Action.COMPLETE, response=outcome.response,
                             attempt_open=True)
        err = outcome.error
        actions = self._reply_actions(err)
        if actions.complete:
            return Judgement(action=Action.COMPLETE, warn=actions.warn)
        first: dict[str, Any] = {"warn": actions.warn, "first_failure": outcome.number == 1,
                 "unexpected": err if err is not None and not isinstance(
                     err, (AdapterError, Retry)) else None}
        if outcome.suspend_asked or actions.suspend:
            return Judgement(action=Action.SUSPEND, **first,
                             reason=Reason.ASKED if outcome.suspend_asked else Reason.REPLY_CODE,
                             text=f"suspended after attempt {outcome.number}: "
                                  f"{error_text(err)}")
        retry_needed = (outcome.retry_asked or isinstance(err, Retry) or actions.retry
                        or (isinstance(err, AdapterError) and err.retryable))
        if actions.disable and not actions.retry:
            return Judgement(action=Action.DISABLE, reason=Reason.REPLY_CODE, **first,
                             text=_disabled(err))
        state = AttemptState(attempt=outcome.number, first_started=first_started,
                             started=outcome.started, ended=outcome.ended, error=err)
        decision = self.policy.decide(state, retry_needed=retry_needed, rng=self.rng)
        if decision.reason is Reason.FAILURE_TIMEOUT:
            response, hooked = self._failure_timeout_hook(host, request, state, decision)
            if hooked is None:  # on_failure_timeout answered instead
                return Judgement(action=Action.COMPLETE, response=response, from_hook=True,
                                 **first)
            decision = hooked
        return self.carry_out(decision, state, actions, **first)

    def carry_out(self, decision: Decision, state: AttemptState,
                  actions: Actions | None = None, **flags: Any) -> Judgement:
        """The judgement that follows the retry policy's ``decision`` about ``state``."""
        if decision.action is Action.RETRY:
            assert decision.at is not None
            return Judgement(action=Action.RETRY, at=decision.at, decided=True, **flags)
        if decision.action is Action.GIVE_UP and actions is not None and actions.disable:
            return Judgement(action=Action.DISABLE, reason=Reason.REPLY_CODE, decided=True,
                             **flags, text=_disabled(state.error))
        return Judgement(action=decision.action, reason=decision.reason, decided=True, **flags,
                         text=_ended(decision, state.error))

    def _failure_timeout_hook(self, host: BusinessOperation, request: Any,
                              state: AttemptState, decision: Decision
                              ) -> tuple[Any, Decision | None]:
        """Run ``on_failure_timeout``: (its response, None), or (None, a retry or the give-up)."""
        host.retry = False
        response = host.on_failure_timeout(request)
        if response is not None:
            return response, None
        if host.retry:
            at = self.policy.backoff.next_start(state, self.rng)
            return None, Decision(Action.RETRY, at=state.ended if at is None else at)
        return None, decision

    def _reply_actions(self, err: BaseException | None) -> Actions:
        if err is None or isinstance(err, Retry):
            return Actions()
        return self.reply_codes.evaluate(err)


def _ended(decision: Decision, err: BaseException | None) -> str:
    """The error text of a give-up or suspension: the reason, then the last error."""
    if decision.reason is Reason.INTERRUPTED:
        return f"{err}; {decision.text}"
    last = error_text(err)
    if decision.action is Action.SUSPEND:
        return f"{decision.text}; last error: {last}"
    return f"giving up: {decision.text}; last error: {last}"


def _disabled(err: BaseException | None) -> str:
    return f"disabled by reply code action D after: {error_text(err)}"
