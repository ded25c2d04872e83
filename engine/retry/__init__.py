"""Retry: the policy, backoff strategies, reply code actions and retry settings (decisions only)."""
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
