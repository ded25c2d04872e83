"""The events of an adapter that cannot start yet (docs/security.md): one ``Error`` at the first
failure, a reminder ``Warning`` at most every :data:`NOT_READY_REMINDER_INTERVAL` seconds, one
``Info`` when it starts."""
from __future__ import annotations

from collections.abc import Callable

from engine.clock import Clock

NOT_READY_REMINDER_INTERVAL = 600.0  # seconds between reminders while an adapter stays down

EventWriter = Callable[[str, str], None]


class ReadinessLog:
    """Turns one adapter's tries to start into a few events. Not thread-safe."""

    def __init__(self, write: EventWriter, clock: Clock, *, retry_interval: float,
                 reminder_interval: float = NOT_READY_REMINDER_INTERVAL) -> None:
        self._write = write
        self.clock = clock
        self.retry_interval = retry_interval
        self.reminder_interval = reminder_interval
        self._down_since: float | None = None
        self._last_event = 0.0
        self._failures = 0
        self.reason: str | None = None  # the last failure's, while down

    @property
    def down(self) -> bool:
        """True between a failure and the next start."""
        return self._down_since is not None

    def failed(self, reason: Exception) -> None:
        """One more try failed with ``reason``."""
        now = self.clock.monotonic()
        self.reason = str(reason)
        if self._down_since is None:
            self._write("Error", f"adapter not ready, messages stay queued; trying again every "
                                 f"{self.retry_interval:g} s: {reason}")
            self._down_since = self._last_event = now
        elif now - self._last_event >= self.reminder_interval:
            self._write("Warning", f"adapter still not ready after {self._outage(now)} "
                                   f"({self._failures + 1} tries), messages stay queued: "
                                   f"{reason}")
            self._last_event = now
        self._failures += 1

    def started(self) -> None:
        """The adapter started: one ``Info`` if it had failed before."""
        self.reason = None
        if self._down_since is None:
            return
        now = self.clock.monotonic()
        self._write("Info", f"adapter ready after {self._outage(now)} ({self._failures + 1} "
                            "tries); the queued messages are being delivered")
        self._down_since, self._failures = None, 0

    def _outage(self, now: float) -> str:
        seconds = 0.0 if self._down_since is None else now - self._down_since
        return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
