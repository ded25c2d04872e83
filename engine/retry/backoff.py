"""Backoff strategies: when the next attempt starts (docs/retries.md).

Each strategy is a frozen dataclass whose ``next_start(state, rng)`` returns the monotonic time
attempt *k+1* may start, or ``None`` to give up; :func:`engine.retry.settings.backoff_from_settings`
builds them from settings.
"""
from __future__ import annotations

import importlib
import inspect
import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from engine.clock import utcnow

if TYPE_CHECKING:
    from engine.retry.state import AttemptState


DEFAULT_RETRY_INTERVAL = 5.0  # seconds between attempt starts (fixed backoff, Ensemble's)
DEFAULT_BACKOFF_BASE = 1.0  # seconds: the first exponential delay
DEFAULT_BACKOFF_MULTIPLIER = 2.0  # growth of the exponential delay per attempt
DEFAULT_BACKOFF_MAX = 60.0  # seconds: the cap of an exponential delay
DEFAULT_RETRY_AFTER_UNIT = "seconds"  # unit of a number in a Retry-After header

FULL_JITTER = "full"
BACKOFF_NAMES = ("fixed", "exponential", "retry_after")
RETRY_AFTER_UNITS = ("seconds", "milliseconds")

_DEFAULT_RNG = random.Random()


class Backoff(Protocol):
    """What a backoff strategy offers the retry policy."""

    def next_start(self, state: AttemptState, rng: random.Random | None = None) -> float | None:
        """Monotonic time the next attempt starts (never before ``state.ended``), or ``None`` to
        give up."""


class DelayFunction(Protocol):
    """A user's delay function: ``get_delay(attempt, *, elapsed, error, status_code, headers)``
    returns seconds (or a ``timedelta``) to wait, or ``None`` to give up."""

    def __call__(self, attempt: int, /, **context: Any) -> float | timedelta | None: ...


def _uniform(rng: random.Random | None, low: float, high: float) -> float:
    """A draw from [low, high]; no draw when the window is empty (keeps rng streams stable)."""
    if high <= low:
        return low
    return (rng or _DEFAULT_RNG).uniform(low, high)


def _check_jitter(jitter: float | str) -> None:
    if jitter == FULL_JITTER:
        return
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not jitter >= 0:
        raise ValueError(f"jitter must be seconds ≥ 0 or {FULL_JITTER!r}, got {jitter!r}")


def _jitter_for(jitter: float | str, delay: float, rng: random.Random | None) -> float:
    """Added jitter: uniform in [0, jitter] seconds, or [0, delay] for ``"full"``."""
    window = delay if jitter == FULL_JITTER else float(jitter)
    return _uniform(rng, 0.0, window)


@dataclass(frozen=True)
class FixedBackoff:
    """Ensemble's RetryInterval: attempt *k+1* starts ``interval`` seconds after attempt *k* started
    (at once if it took longer)."""

    interval: float = DEFAULT_RETRY_INTERVAL

    def __post_init__(self) -> None:
        if not self.interval >= 0:
            raise ValueError(f"interval must be seconds ≥ 0, got {self.interval!r}")

    def next_start(self, state: AttemptState, rng: random.Random | None = None) -> float | None:
        return max(state.ended, state.started + self.interval)


@dataclass(frozen=True)
class ExponentialBackoff:
    """Delay ``min(base · multiplier^(k−1), cap)`` after attempt *k* ends, plus jitter (seconds, or
    ``"full"``: drawn from [0, delay])."""

    base: float = DEFAULT_BACKOFF_BASE
    multiplier: float = DEFAULT_BACKOFF_MULTIPLIER
    cap: float = DEFAULT_BACKOFF_MAX
    jitter: float | str = 0.0

    def __post_init__(self) -> None:
        for name in ("base", "multiplier", "cap"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be ≥ 0, got {value!r}")
        _check_jitter(self.jitter)

    def raw_delay(self, attempt: int) -> float:
        """The delay after attempt ``attempt`` before jitter, in seconds (capped)."""
        if self.base == 0:
            return 0.0
        try:
            grown = self.base * self.multiplier ** (attempt - 1)
        except OverflowError:
            grown = math.inf
        return min(grown, self.cap)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay after attempt ``attempt``, jitter included, in seconds."""
        raw = self.raw_delay(attempt)
        if self.jitter == FULL_JITTER:
            return _uniform(rng, 0.0, raw)
        return raw + _jitter_for(self.jitter, raw, rng)

    def next_start(self, state: AttemptState, rng: random.Random | None = None) -> float | None:
        return state.ended + self.delay(state.attempt, rng)


@dataclass(frozen=True)
class RetryAfterBackoff:
    """The server's ``Retry-After`` header, bounded to [``fallback.base``, ``fallback.cap``], plus
    jitter; ``fallback`` without the header (docs/retries.md)."""

    unit: str = DEFAULT_RETRY_AFTER_UNIT
    jitter: float | str = 0.0
    fallback: ExponentialBackoff = field(default_factory=ExponentialBackoff)
    now: Callable[[], datetime] = field(default=utcnow, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.unit not in RETRY_AFTER_UNITS:
            raise ValueError(f"unit must be one of {RETRY_AFTER_UNITS}, got {self.unit!r}")
        _check_jitter(self.jitter)

    def retry_after(self, error: BaseException | None) -> float | None:
        """The delay the header asks for, unbounded (finite, ≥ 0); ``None`` without a usable
        ``Retry-After``. Never raises."""
        value = _header(error, "retry-after")
        if value is None:
            return None
        return parse_retry_after(value, unit=self.unit, now=self.now())

    def bounded(self, asked: float) -> float:
        """``asked`` bounded to [``backoff_base``, ``backoff_max``] (the cap wins)."""
        return min(max(asked, self.fallback.base), self.fallback.cap)

    def wait(self, error: BaseException | None) -> float | None:
        """:meth:`bounded` of the header's delay; ``None`` without a usable header."""
        asked = self.retry_after(error)
        return None if asked is None else self.bounded(asked)

    def next_start(self, state: AttemptState, rng: random.Random | None = None) -> float | None:
        delay = self.wait(state.error)
        if delay is None:
            return self.fallback.next_start(state, rng)
        return state.ended + delay + _jitter_for(self.jitter, delay, rng)


def _header(error: BaseException | None, name: str) -> str | None:
    headers = getattr(error, "headers", None)
    if not isinstance(headers, Mapping):
        return None
    for key, value in headers.items():
        if str(key).lower() == name:
            return str(value)
    return None


MAX_RETRY_AFTER_CHARS = 64  # a longer Retry-After value is not a number or a date
_NUMBER = re.compile(r"\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


def parse_retry_after(value: str, *, unit: str = "seconds", now: datetime) -> float | None:
    """Seconds to wait for a ``Retry-After`` value (a number or an HTTP date); ``None`` if unusable.
    Always finite; never raises."""
    text = value.strip()
    if len(text) > MAX_RETRY_AFTER_CHARS:
        return None
    if not _NUMBER.match(text):  # no "1_000", "0x10", "inf" or "nan" from a server
        return _date_delay(text, now)
    number = float(text)
    if not math.isfinite(number) or number < 0:
        return None
    seconds = number / 1000.0 if unit == "milliseconds" else number
    return seconds if math.isfinite(seconds) else None


def _date_delay(text: str, now: datetime) -> float | None:
    try:
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(text)
        if when is None:  # older Pythons return None instead of raising
            return None
        if when.tzinfo is None:  # "-0000": UTC with no offset information
            when = when.replace(tzinfo=UTC)
        return max((when - now).total_seconds(), 0.0)
    except Exception:
        return None


@dataclass(frozen=True)
class FunctionBackoff:
    """A user's :class:`DelayFunction`, called with the keywords its signature accepts; its delay
    runs from the end of the failed attempt, capped at ``cap``."""

    func: DelayFunction
    cap: float = DEFAULT_BACKOFF_MAX
    _accepts: frozenset[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not callable(self.func):
            raise TypeError(f"delay function must be callable, got {self.func!r}")
        if not self.cap >= 0:
            raise ValueError(f"cap must be ≥ 0, got {self.cap!r}")
        object.__setattr__(self, "_accepts", _keyword_names(self.func))

    def next_start(self, state: AttemptState, rng: random.Random | None = None) -> float | None:
        context = {"elapsed": state.ended - state.first_started, "error": state.error,
                   "status_code": state.status_code, "headers": state.headers}
        kwargs = {k: v for k, v in context.items() if self._accepts is None or k in self._accepts}
        delay = self.func(state.attempt, **kwargs)
        if delay is None:
            return None
        return state.ended + min(max(_seconds(delay, self.func), 0.0), self.cap)


def _keyword_names(func: Callable[..., Any]) -> frozenset[str] | None:
    """Names ``func`` takes by keyword; ``None`` when it takes ``**kwargs`` (all of them)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _seconds(delay: Any, func: Callable[..., Any]) -> float:
    if isinstance(delay, timedelta):
        return delay.total_seconds()
    if isinstance(delay, int) and not isinstance(delay, bool):
        return float(delay) if abs(delay) < 2 ** 1000 else math.inf if delay > 0 else 0.0
    if not isinstance(delay, float) or math.isnan(delay):
        name = getattr(func, "__qualname__", repr(func))
        raise TypeError(f"delay function {name} returned {delay!r}; expected seconds or None")
    return float(delay)


def resolve_function(spec: str) -> Callable[..., Any]:
    """Import ``"module:function"``; ``ValueError`` says which part failed."""
    module_name, _, attr = spec.partition(":")
    if not module_name.strip() or not attr.strip():
        raise ValueError(f"expected 'module:function', got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name.strip())
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r} of {spec!r}: {exc}") from exc
    except Exception as exc:
        raise ValueError(f"importing module {module_name!r} of {spec!r} failed: "
                         f"{type(exc).__name__}: {exc}") from exc
    for part in attr.strip().split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from exc
    if not callable(target):
        raise ValueError(f"{spec!r} is not callable (it is a {type(target).__name__})")
    return target


def check_backoff(value: str) -> str:
    """``Setting.check`` for ``backoff``: a strategy name or a resolvable ``module:function``."""
    text = value.strip()
    if ":" in text:
        resolve_function(text)
        return text
    if text not in BACKOFF_NAMES:
        raise ValueError(f"unknown backoff {value!r}; expected one of "
                         + ", ".join(repr(n) for n in BACKOFF_NAMES) + " or 'module:function'")
    return text


def check_jitter(value: float | str) -> float | str:
    """``Setting.check`` for ``jitter``: seconds ≥ 0, or the string ``"full"``."""
    if isinstance(value, str):
        if value.strip().lower() == FULL_JITTER:
            return FULL_JITTER
        raise ValueError(f"expected seconds ≥ 0 or {FULL_JITTER!r}, got {value!r}")
    _check_jitter(value)
    return value
