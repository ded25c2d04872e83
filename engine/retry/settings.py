"""The retry settings of an item (docs/retries.md, docs/settings.md), the typed
:class:`RetrySettings`, and :func:`backoff_from_settings`. Every default lives in its
:class:`~engine.settings.Setting` declaration here and nowhere else."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

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
from engine.settings import Setting, TypedSettings

__all__ = ["DEFAULT_FAILURE_TIMEOUT", "FOREVER", "OUTCOME_SETTINGS", "RETRY_DEFAULTS",
           "RETRY_SETTINGS", "UNKNOWN_OUTCOME_CHOICES", "RetrySettings", "backoff_from_settings"]

FOREVER = -1  # failure_timeout: retry forever
DEFAULT_FAILURE_TIMEOUT = 15.0  # seconds from the first attempt's start (Ensemble's)
UNKNOWN_OUTCOME_CHOICES = ("error", "suspend")

RETRY_SETTINGS: tuple[Setting, ...] = (
    Setting(name="retry_interval", kind=float, default=DEFAULT_RETRY_INTERVAL, minimum=0,
            help="seconds from the start of one attempt to the start of the next (fixed backoff)"),
    Setting(name="failure_timeout", kind=float, default=DEFAULT_FAILURE_TIMEOUT, minimum=0,
            allow=(FOREVER,),
            help="seconds after the first attempt's start when retrying stops; "
                 "-1 = retry forever, 0 = a single attempt"),
    Setting(name="backoff", kind=str, default="fixed", check=check_backoff,
            help="'fixed', 'exponential', 'retry_after' or 'module:function'"),
    Setting(name="backoff_base", kind=float, default=DEFAULT_BACKOFF_BASE, minimum=0,
            help="seconds: the first exponential delay"),
    Setting(name="backoff_multiplier", kind=float, default=DEFAULT_BACKOFF_MULTIPLIER, minimum=1,
            help="growth factor of the exponential delay per attempt"),
    Setting(name="backoff_max", kind=float, default=DEFAULT_BACKOFF_MAX, minimum=0,
            help="seconds: the longest backoff delay before jitter"),
    Setting(name="jitter", kind=(float, str), default=0.0, minimum=0, check=check_jitter,
            help="seconds of random delay added (0 = none), or 'full' for full jitter"),
    Setting(name="retry_after_unit", kind=str, default=DEFAULT_RETRY_AFTER_UNIT,
            choices=RETRY_AFTER_UNITS,
            help="unit of a numeric Retry-After header"),
    Setting(name="max_attempts", kind=int, default=0, minimum=0,
            help="most attempts per message; 0 = unlimited"),
    Setting(name="strict_failure_timeout", kind=bool, default=False,
            help="make failure_timeout a hard budget: no attempt starts after it"),
    Setting(name="reply_code_actions", kind=str, default=DEFAULT_REPLY_CODE_ACTIONS,
            check=check_reply_code_actions,
            help="Ensemble reply code actions, e.g. 'E#503=R,E=F'"),
)

# declared by outbound adapters, read by the retry policy (defaults for an item without one)
OUTCOME_SETTINGS: tuple[Setting, ...] = (
    Setting(name="idempotent", kind=bool, default=True,
            help="false: a request that may have been processed is never re-sent"),
    Setting(name="on_unknown_outcome", kind=str, default="error", choices=UNKNOWN_OUTCOME_CHOICES,
            help="what a non-idempotent item does with an outcome-unknown failure"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrySettings(TypedSettings):
    """An item's retry settings (see :data:`RETRY_SETTINGS` and :data:`OUTCOME_SETTINGS`)."""

    DECLARED: ClassVar[tuple[Setting, ...]] = (*RETRY_SETTINGS, *OUTCOME_SETTINGS)

    retry_interval: float
    failure_timeout: float
    backoff: str
    backoff_base: float
    backoff_multiplier: float
    backoff_max: float
    jitter: float | str
    retry_after_unit: str
    max_attempts: int
    strict_failure_timeout: bool
    reply_code_actions: str
    idempotent: bool
    on_unknown_outcome: str


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
