"""Time, injected: durations from :meth:`Clock.monotonic`, stored timestamps from
:meth:`Clock.now` (aware UTC)."""
from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, overload


def utcnow() -> datetime:
    """The current time, timezone-aware UTC: the one helper for stored timestamps."""
    return datetime.now(UTC)


@overload
def as_utc(value: datetime) -> datetime: ...
@overload
def as_utc(value: datetime | None) -> datetime | None: ...
def as_utc(value: datetime | None) -> datetime | None:
    """``value`` as aware UTC (SQLite hands back naive datetimes that are UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class Clock(Protocol):
    """What the engine needs of time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""

    def now(self) -> datetime:
        """The current time, aware UTC."""

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        """Wait ``seconds`` (≤ 0: not at all); return True early if ``stop`` is set."""


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return utcnow()

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is None:
            if seconds > 0:
                time.sleep(seconds)
            return False
        return stop.wait(max(seconds, 0.0))


class VirtualClock:
    """A clock that only moves when told to; ``sleep`` advances it instantly."""

    def __init__(self, start: datetime | None = None) -> None:
        self._t = 0.0
        self._start = start or datetime(2000, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    @property
    def start(self) -> datetime:
        """What ``now()`` returned at monotonic time 0."""
        return self._start

    def monotonic(self) -> float:
        return self._t

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._t)

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``."""
        with self._lock:
            self._t += max(seconds, 0.0)

    def advance_to(self, t: float) -> None:
        """Move time forward to ``t`` (never back)."""
        with self._lock:
            self._t = max(self._t, t)

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return True
        self.advance(seconds)
        return False
