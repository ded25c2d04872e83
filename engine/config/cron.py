"""Crontab expressions as APScheduler triggers: one module for the cron strings of service
schedules and item working windows (it imports nothing of the engine, and APScheduler only
when an expression is parsed: commands that never see one stay quick)."""
from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

__all__ = ["parse_schedule"]

# Crontab numbers days of the week 0-7 with 0 and 7 = Sunday; APScheduler 3 numbers them 0-6
# from Monday. Numbers are translated to names so "1-5" means Monday to Friday, as in cron.
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def parse_schedule(expr: str) -> CronTrigger:
    """A UTC :class:`CronTrigger` for a crontab expression ``"min hour day month dow"``.

    Day-of-week numbers follow crontab (0 or 7 = Sunday, 1 = Monday), not APScheduler 3
    (0 = Monday). As in APScheduler, when both day-of-month and day-of-week are restricted a
    time must match both (crontab fires when either matches). Raises ``ValueError``.
    """
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields (minute hour day month day-of-week), "
                         f"got {len(fields)}")
    minute, hour, day, month, dow = fields
    from apscheduler.triggers.cron import CronTrigger

    return CronTrigger(minute=minute, hour=hour, day=day, month=month,
                       day_of_week=_crontab_days(dow), timezone=UTC)


def _crontab_days(field: str) -> str:
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.lower().split(","):
        body, slash, step_text = part.partition("/")
        step = _number(step_text, "step") if slash else 1
        if step < 1:
            raise ValueError(f"day-of-week {field!r}: step must be ≥ 1")
        if body == "*":
            low, high = 0, 6
        elif "-" in body:
            first, _, last = body.partition("-")
            low, high = _day(first, field), _day(last, field)
        else:
            low = _day(body, field)
            high = 6 if slash else low  # "1/2" = from Monday, every other day
        if low > high:
            raise ValueError(f"day-of-week {field!r}: range {body!r} runs backwards")
        days.update(d % 7 for d in range(low, high + 1, step))
    if len(days) == 7:
        return "*"
    return ",".join(_DAY_NAMES[d] for d in sorted(days))


def _day(text: str, field: str) -> int:
    if text in _DAY_NAMES:
        return _DAY_NAMES.index(text)
    value = _number(text, f"day-of-week {field!r}")
    if not 0 <= value <= 7:
        raise ValueError(f"day-of-week {field!r}: {value} is not 0-7 (0 and 7 = Sunday)")
    return value


def _number(text: str, what: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{what}: {text!r} is not a number or a day name (sun … sat)")
    return int(text)
