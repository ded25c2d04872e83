"""Retry: the policy that decides after a failed attempt, the backoff strategies it uses,
Ensemble's reply code actions, and the typed retry settings they are built from. Decisions
only; the worker sleeps or reschedules."""
from __future__ import annotations

from engine.retry.backoff import (
    Backoff,
    DelayFunction,
    ExponentialBackoff,
    FixedBackoff,
    FunctionBackoff,
    RetryAfterBackoff,
    check_backoff,
    check_jitter,
    parse_retry_after,
    resolve_function,
)
from engine.retry.policy import Action, Decision, Reason, RetryPolicy
from engine.retry.reply_codes import (
    DEFAULT_REPLY_CODE_ACTIONS,
    Actions,
    ReplyCode,
    ReplyCodeActions,
    ReplyCodeRule,
    check_reply_code_actions,
)
from engine.retry.settings import RETRY_SETTINGS, RetrySettings, backoff_from_settings
from engine.retry.state import AttemptState

__all__ = [
    "DEFAULT_REPLY_CODE_ACTIONS", "RETRY_SETTINGS", "Action", "Actions", "AttemptState", "Backoff",
    "Decision", "DelayFunction", "ExponentialBackoff", "FixedBackoff", "FunctionBackoff",
    "Reason", "ReplyCode", "ReplyCodeActions", "ReplyCodeRule", "RetryAfterBackoff", "RetryPolicy",
    "RetrySettings", "backoff_from_settings", "check_backoff", "check_jitter",
    "check_reply_code_actions", "parse_retry_after", "resolve_function",
]
