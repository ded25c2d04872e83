"""The retry policy: after a failed attempt, retry at T, give up, or suspend (docs/retries.md). It
only decides; the worker acts. Times are monotonic seconds."""
from __future__ import annotations

import dataclasses
import enum
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import Delivery
from engine.retry.backoff import Backoff, FixedBackoff, RetryAfterBackoff
from engine.retry.settings import (
    FOREVER,
    RETRY_DEFAULTS,
    UNKNOWN_OUTCOME_CHOICES,
    RetrySettings,
    backoff_from_settings,
)
from engine.retry.state import AttemptState

__all__ = ["FOREVER", "INTERRUPTED_REASON", "UNKNOWN_OUTCOME_CHOICES", "UNKNOWN_OUTCOME_REASON",
           "Action", "Decision", "Reason", "RetryPolicy"]

# no retry waits longer, whatever a strategy computes: every wait stays storable and sleepable
MAX_WAIT = 366 * 24 * 3600.0

UNKNOWN_OUTCOME_REASON = ("outcome unknown: the request may have been processed by the server; "
                          "it was not re-sent because the item is not idempotent")
INTERRUPTED_REASON = ("the request may have been processed, so it is not re-sent (the item is "
                      "not idempotent); resend or discard it")


class Action(str, enum.Enum):
    """What follows an attempt (the delivery policy adds COMPLETE and DISABLE)."""

    COMPLETE = "complete"  # a success, or an error that reply code action C accepts
    RETRY = "retry"
    GIVE_UP = "give_up"  # message ends in Error
    SUSPEND = "suspend"  # message ends in Suspended, for an operator
    DISABLE = "disable"  # reply code action D: the item off, the message back in its queue

    def __str__(self) -> str:
        return self.value


class Reason(str, enum.Enum):
    """Why a delivery stops: the value callers test (the event text is never matched)."""

    NOT_RETRYABLE = "not_retryable"  # the failure asks for no retry
    MAX_ATTEMPTS = "max_attempts"
    FAILURE_TIMEOUT = "failure_timeout"  # run out, or would be before the next attempt starts
    DELAY_FUNCTION = "delay_function"  # a backoff function answered None
    OUTCOME_UNKNOWN = "outcome_unknown"  # may have been processed; the item is not idempotent
    INTERRUPTED = "interrupted"  # in flight when its daemon stopped; the item is not idempotent
    REPLY_CODE = "reply_code"  # reply code action S or D
    ASKED = "asked"  # the operation set suspend_message

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Decision:
    """The policy's answer: ``at`` the next start (RETRY only), or why it stops."""

    action: Action
    at: float | None = None
    reason: Reason | None = None
    text: str = ""


def _give_up(reason: Reason, text: str) -> Decision:
    return Decision(Action.GIVE_UP, reason=reason, text=text)


def _seconds(value: float) -> str:
    return f"{round(value, 3):g}"


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """When to retry a failed message, and when to stop (the item's retry settings)."""

    retry_interval: float = RETRY_DEFAULTS.retry_interval
    failure_timeout: float = RETRY_DEFAULTS.failure_timeout
    backoff: Backoff = None  # type: ignore[assignment]  # None → FixedBackoff(retry_interval)
    max_attempts: int = RETRY_DEFAULTS.max_attempts
    strict: bool = RETRY_DEFAULTS.strict_failure_timeout
    idempotent: bool = RETRY_DEFAULTS.idempotent
    on_unknown_outcome: str = RETRY_DEFAULTS.on_unknown_outcome

    def __post_init__(self) -> None:
        if self.backoff is None:
            object.__setattr__(self, "backoff", FixedBackoff(self.retry_interval))
        if not self.retry_interval >= 0:
            raise ValueError(f"retry_interval must be seconds ≥ 0, got {self.retry_interval!r}")
        if not (self.failure_timeout >= 0 or self.failure_timeout == FOREVER):
            raise ValueError(f"failure_timeout must be ≥ 0 or -1, got {self.failure_timeout!r}")
        if self.max_attempts < 0:
            raise ValueError(f"max_attempts must be ≥ 0 (0 = unlimited), got {self.max_attempts}")
        if self.on_unknown_outcome not in UNKNOWN_OUTCOME_CHOICES:
            raise ValueError(f"on_unknown_outcome must be one of {UNKNOWN_OUTCOME_CHOICES}, "
                             f"got {self.on_unknown_outcome!r}")

    def new(self, **changes: Any) -> RetryPolicy:
        """A copy with ``changes`` applied (the policy itself never changes)."""
        return dataclasses.replace(self, **changes)

    @property
    def bounded(self) -> bool:
        """True unless ``failure_timeout`` is -1 (retry forever)."""
        return self.failure_timeout != FOREVER

    def deadline(self, *, first_started: float, started: float, response_timeout: float) -> float:
        """When an attempt started at ``started`` must be over (``math.inf``: no limit)."""
        end = math.inf if response_timeout < 0 else started + response_timeout
        if self.strict and self.bounded:
            end = min(end, first_started + self.failure_timeout)
        return end

    def decide(self, state: AttemptState, *, retry_needed: bool, interrupted: bool = False,
               rng: random.Random | None = None) -> Decision:
        """Decide after failed attempt ``state`` (rules 4, 5 of docs/retries.md). ``interrupted``:
        it was in flight when its daemon stopped; ``rng`` draws jitter."""
        refusal = self._refusal(state, retry_needed, interrupted)
        if refusal is not None:
            return refusal
        return self._schedule(state, rng)

    def _refusal(self, state: AttemptState, retry_needed: bool,
                 interrupted: bool) -> Decision | None:
        if not retry_needed:
            return _give_up(Reason.NOT_RETRYABLE, "not retryable")
        unknown = self._unknown_outcome(state, interrupted)
        if unknown is not None:
            return unknown
        if self.max_attempts > 0 and state.attempt >= self.max_attempts:
            return _give_up(Reason.MAX_ATTEMPTS, f"max attempts ({self.max_attempts}) reached")
        if self.bounded and state.elapsed >= self.failure_timeout:
            return _give_up(Reason.FAILURE_TIMEOUT,
                            f"{self._exceeded()} after {_attempts(state.attempt)} "
                            f"in {_seconds(state.elapsed)} seconds")
        return None

    def _unknown_outcome(self, state: AttemptState, interrupted: bool) -> Decision | None:
        """The outcome-unknown rule: only an idempotent item re-sends."""
        if self.idempotent or getattr(state.error, "delivery", None) != Delivery.UNKNOWN:
            return None
        if interrupted:
            return Decision(Action.SUSPEND, reason=Reason.INTERRUPTED, text=INTERRUPTED_REASON)
        action = Action.SUSPEND if self.on_unknown_outcome == "suspend" else Action.GIVE_UP
        return Decision(action, reason=Reason.OUTCOME_UNKNOWN, text=UNKNOWN_OUTCOME_REASON)

    def _schedule(self, state: AttemptState, rng: random.Random | None) -> Decision:
        refusal = self._retry_after_refusal(state)
        if refusal is not None:
            return refusal
        at = self.backoff.next_start(state, rng)
        if at is None:
            return _give_up(Reason.DELAY_FUNCTION, "the delay function gave up")
        at = min(at, state.ended + MAX_WAIT) if at >= state.ended else state.ended
        if self.bounded and isinstance(self.backoff, RetryAfterBackoff):
            at = min(at, self._budget_end(state))  # jitter must not push past the budget
        if self.strict and self.bounded and at >= self._budget_end(state):
            return _give_up(Reason.FAILURE_TIMEOUT,
                            f"{self._exceeded()}: the next attempt would start "
                            f"{_seconds(at - state.first_started)} seconds after the first")
        return Decision(Action.RETRY, at=at)

    def _retry_after_refusal(self, state: AttemptState) -> Decision | None:
        if not (self.bounded and isinstance(self.backoff, RetryAfterBackoff)):
            return None
        asked = self.backoff.retry_after(state.error)
        left = self._budget_end(state) - state.ended
        if asked is None:
            return None
        wait = self.backoff.bounded(asked)
        if wait <= left:
            return None
        shown = f"Retry-After of {_seconds(wait)} seconds"
        if wait != asked:
            shown += (f" (the server asked for {_seconds(asked)}; backoff_base "
                      f"{self.backoff.fallback.base:g} and backoff_max "
                      f"{self.backoff.fallback.cap:g} bound it)")
        return _give_up(Reason.FAILURE_TIMEOUT,
                        f"{shown} is longer than the {_seconds(left)} seconds left of the "
                        f"FailureTimeout of {self.failure_timeout:g} seconds")

    def _budget_end(self, state: AttemptState) -> float:
        return state.first_started + self.failure_timeout

    def _exceeded(self) -> str:
        return f"FailureTimeout of {self.failure_timeout:g} seconds exceeded"

    @classmethod
    def from_settings(cls, settings: RetrySettings | Mapping[str, Any]) -> RetryPolicy:
        """The policy for an item's retry settings (a mapping is read as validated settings)."""
        if not isinstance(settings, RetrySettings):
            settings = RetrySettings.from_validated(settings)
        return cls(retry_interval=settings.retry_interval,
                   failure_timeout=settings.failure_timeout,
                   backoff=backoff_from_settings(settings),
                   max_attempts=settings.max_attempts,
                   strict=settings.strict_failure_timeout,
                   idempotent=settings.idempotent,
                   on_unknown_outcome=settings.on_unknown_outcome)


def _attempts(n: int) -> str:
    return f"{n} attempt" + ("" if n == 1 else "s")

