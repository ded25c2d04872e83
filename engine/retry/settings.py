"""The retry settings of an item (docs/retries.md, docs/settings.md), declared by the typed
:class:`RetrySettings`, and :func:`backoff_from_settings`."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigurationError
from engine.retry.backoff import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_MAX,
    DEFAULT_BACKOFF_MULTIPLIER,
    DEFAULT_RETRY_AFTER_UNIT,
    DEFAULT_RETRY_INTERVAL,
    RETRY_AFTER_UNITS,
    Backoff,
    ExponentialBackoff,
    FixedBackoff,
    FunctionBackoff,
    RetryAfterBackoff,
    check_backoff,
    check_jitter,
    resolve_function,
)
from engine.retry.reply_codes import DEFAULT_REPLY_CODE_ACTIONS, check_reply_code_actions
from engine.settings import Setting, TypedSettings, declared_in, setting

__all__ = ["DEFAULT_FAILURE_TIMEOUT", "FOREVER", "OUTCOME_SETTINGS", "RETRY_DEFAULTS",
           "RETRY_SETTINGS", "UNKNOWN_OUTCOME_CHOICES", "RetrySettings", "backoff_from_settings"]

FOREVER = -1  # failure_timeout: retry forever
DEFAULT_FAILURE_TIMEOUT = 15.0  # seconds from the first attempt's start (Ensemble's)
UNKNOWN_OUTCOME_CHOICES = ("error", "suspend")

@dataclass(frozen=True, slots=True, kw_only=True)
class RetrySettings(TypedSettings):
    """An item's retry settings: :data:`RETRY_SETTINGS` and :data:`OUTCOME_SETTINGS`."""

    retry_interval: float = setting(
        kind=float, default=DEFAULT_RETRY_INTERVAL, minimum=0,
        help="seconds from the start of one attempt to the start of the next (fixed backoff)")
    failure_timeout: float = setting(
        kind=float, default=DEFAULT_FAILURE_TIMEOUT, minimum=0, allow=(FOREVER,),
        help="seconds after the first attempt's start when retrying stops; "
             "-1 = retry forever, 0 = a single attempt")
    backoff: str = setting(kind=str, default="fixed", check=check_backoff,
                           help="'fixed', 'exponential', 'retry_after' or 'module:function'")
    backoff_base: float = setting(kind=float, default=DEFAULT_BACKOFF_BASE, minimum=0,
                                  help="seconds: the first exponential delay")
    backoff_multiplier: float = setting(
        kind=float, default=DEFAULT_BACKOFF_MULTIPLIER, minimum=1,
        help="growth factor of the exponential delay per attempt")
    backoff_max: float = setting(kind=float, default=DEFAULT_BACKOFF_MAX, minimum=0,
                                 help="seconds: the longest backoff delay before jitter")
    jitter: float | str = setting(
        kind=(float, str), default=0.0, minimum=0, check=check_jitter,
        help="seconds of random delay added (0 = none), or 'full' for full jitter")
    retry_after_unit: str = setting(kind=str, default=DEFAULT_RETRY_AFTER_UNIT,
                                    choices=RETRY_AFTER_UNITS,
                                    help="unit of a numeric Retry-After header")
    max_attempts: int = setting(kind=int, default=0, minimum=0,
                                help="most attempts per message; 0 = unlimited")
    strict_failure_timeout: bool = setting(
        kind=bool, default=False,
        help="make failure_timeout a hard budget: no attempt starts after it")
    reply_code_actions: str = setting(kind=str, default=DEFAULT_REPLY_CODE_ACTIONS,
                                      check=check_reply_code_actions,
                                      help="Ensemble reply code actions, e.g. 'E#503=R,E=F'")
    # declared by outbound adapters, read by the retry policy (defaults for an item without one)
    idempotent: bool = setting(
        kind=bool, default=True,
        help="false: a request that may have been processed is never re-sent")
    on_unknown_outcome: str = setting(
        kind=str, default="error", choices=UNKNOWN_OUTCOME_CHOICES,
        help="what a non-idempotent item does with an outcome-unknown failure")


OUTCOME_SETTINGS: tuple[Setting, ...] = declared_in(RetrySettings, "idempotent",
                                                    "on_unknown_outcome")
RETRY_SETTINGS: tuple[Setting, ...] = tuple(
    s for s in RetrySettings.DECLARED if s not in OUTCOME_SETTINGS)
RETRY_DEFAULTS = RetrySettings.defaults()


def backoff_from_settings(settings: RetrySettings | Mapping[str, Any]) -> Backoff:
    """The backoff strategy the retry settings ask for: ``"fixed"``, ``"exponential"``,
    ``"retry_after"``, ``"module:function"`` or a strategy object. A mapping is read as validated
    settings. Raises :class:`ConfigurationError` naming ``backoff``."""
    if not isinstance(settings, RetrySettings):
        settings = RetrySettings.from_validated(settings)
    kind: Any = settings.backoff
    if not isinstance(kind, str):
        if callable(getattr(kind, "next_start", None)):
            return kind
        raise ConfigurationError(f"expected a strategy name or 'module:function', got {kind!r}",
                                 key="backoff")
    try:
        return _build(check_backoff(kind), settings)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(str(exc), key="backoff") from exc


def _build(kind: str, settings: RetrySettings) -> Backoff:
    if kind == "fixed":
        return FixedBackoff(settings.retry_interval)
    jitter = check_jitter(settings.jitter)
    exponential = ExponentialBackoff(base=settings.backoff_base,
                                     multiplier=settings.backoff_multiplier,
                                     cap=settings.backoff_max, jitter=jitter)
    if kind == "exponential":
        return exponential
    if kind == "retry_after":
        return RetryAfterBackoff(unit=settings.retry_after_unit, jitter=jitter,
                                 fallback=exponential)
    return FunctionBackoff(resolve_function(kind), cap=settings.backoff_max)
