"""Schedule windows: an operation item that runs only between cron-given start and stop times (UTC).
The window is open when the latest start is after the latest stop; :class:`ScheduleWindow` answers
``may_claim``."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the triggers come from engine.service, with APScheduler, when needed
    from apscheduler.triggers.base import BaseTrigger

from engine.clock import Clock, SystemClock
from engine.config.cron import parse_schedule
from engine.delivery.middleware import Middleware
from engine.settings import Setting, TypedSettings, setting

LOOKBACK = timedelta(days=8)  # how far back the last start/stop is searched (a weekly cron fits)
EXAMPLE = '{ start = "0 8 * * 1-5", stop = "0 18 * * 1-5" }'


def check_window(value: dict[str, Any]) -> dict[str, str]:
    """Validate a ``schedule`` table; returns it with both crons normalised."""
    if not value:
        return {}
    if set(value) != {"start", "stop"} or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"expected a table with two cron strings, start and stop (UTC), e.g. "
                         f"schedule = {EXAMPLE}; got keys {sorted(value)}")
    for key in ("start", "stop"):
        try:
            parse_schedule(value[key])
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{key} {value[key]!r} is not a cron expression: {exc}; "
                             f"e.g. schedule = {EXAMPLE}") from exc
    return {"start": " ".join(value["start"].split()), "stop": " ".join(value["stop"].split())}


@dataclass(frozen=True, kw_only=True)
class WindowField(TypedSettings):
    """The setting the schedule window reads."""

    schedule: Mapping[str, str] = setting(  # {"start": cron, "stop": cron}, or {}
        kind=dict, default={}, check=check_window,
        help='cron start and stop times (UTC) of the item\'s working window, e.g. '
             '{ start = "0 8 * * 1-5", stop = "0 18 * * 1-5" }; {} = always')


WINDOW_SETTINGS: tuple[Setting, ...] = WindowField.DECLARED


@dataclass
class ScheduleWindow(Middleware):
    """Answers "is the item's window open at ``now``?", cheaply between transitions."""

    SETTINGS = WINDOW_SETTINGS

    start: BaseTrigger
    stop: BaseTrigger
    clock: Clock = field(default_factory=SystemClock, kw_only=True)
    _open: bool = field(default=False, init=False)
    _valid_from: datetime | None = field(default=None, init=False)
    _valid_until: datetime | None = field(default=None, init=False)

    @classmethod
    def from_setting(cls, value: dict[str, str],
                     clock: Clock | None = None) -> ScheduleWindow | None:
        """The window of a validated ``schedule`` table; None when there is none."""
        if not value:
            return None
        return cls(parse_schedule(value["start"]), parse_schedule(value["stop"]),
                   clock=clock or SystemClock())

    def may_claim(self) -> bool:
        return self.is_open(self.clock.now())

    def is_open(self, now: datetime) -> bool:
        if (self._valid_from is None or self._valid_until is None
                or not self._valid_from <= now < self._valid_until):
            self._valid_from = now
            last_start, last_stop = _last_fire(self.start, now), _last_fire(self.stop, now)
            self._open = last_start is not None and (last_stop is None or last_start > last_stop)
            self._valid_until = min(t for t in (_next_fire(self.start, now),
                                                _next_fire(self.stop, now), now + LOOKBACK)
                                    if t is not None)
        return self._open


def _next_fire(trigger: BaseTrigger, now: datetime) -> datetime | None:
    return trigger.get_next_fire_time(None, now + timedelta(microseconds=1))


def _last_fire(trigger: BaseTrigger, now: datetime) -> datetime | None:
    """The latest fire time ≤ ``now`` within LOOKBACK (None: none)."""
    last, t = None, trigger.get_next_fire_time(None, now - LOOKBACK)
    while t is not None and t <= now:
        last, t = t, trigger.get_next_fire_time(t, t + timedelta(microseconds=1))
    return last
