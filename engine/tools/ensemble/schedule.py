"""Ensemble's ``Schedule`` item setting as Encore's working window (``schedule = { start,
stop }``, two crons).

Ensemble writes a comma-separated list of ``START|STOP:YYYY-MM-DDThh:mm:ss`` events, where
each date field may be ``*`` and ``WEEK-*-DD`` names a day of the week (00 = Sunday). The
events of one action at one time of day become one cron (several weekdays listed in it);
what a cron cannot say — a date in a given year, the n-th weekday of a month, seconds, two
times of day, a named schedule (``@Name``) — is refused with the reason.
"""
from __future__ import annotations

import re

_EVENT = re.compile(r"^(START|STOP):(\*|\d{4}|WEEK)-(\*|\d{2})-(\*|\d{2})T(\d{2}):(\d{2}):(\d{2})$",
                    re.I)


def window_of(schedule: str) -> dict[str, str]:
    """``{"start": cron, "stop": cron}`` for an Ensemble schedule string; ValueError saying
    what cannot be expressed."""
    text = schedule.strip()
    if text.startswith("@"):
        raise ValueError(f"{text} names a schedule spec defined outside the production; "
                         "write its start and stop times as crons by hand")
    crons: dict[str, set[tuple[str, str, str, str, str]]] = {"start": set(), "stop": set()}
    for event in (e.strip() for e in text.split(",") if e.strip()):
        found = _EVENT.match(event)
        if found is None:
            raise ValueError(f"{event!r} is not ACTION:YYYY-MM-DDThh:mm:ss")
        action, year, month, day, hour, minute, second = found.groups()
        if second != "00":
            raise ValueError(f"{event}: a cron has no seconds")
        if year.upper() == "WEEK":
            if month != "*":
                raise ValueError(f"{event}: the n-th weekday of a month has no cron")
            fields = (str(int(minute)), str(int(hour)), "*", "*",
                      "*" if day == "*" else str(int(day)))
        elif year != "*":
            raise ValueError(f"{event}: a date in one given year has no cron")
        else:
            fields = (str(int(minute)), str(int(hour)), "*" if day == "*" else str(int(day)),
                      "*" if month == "*" else str(int(month)), "*")
        crons[action.lower()].add(fields)
    if not crons["start"] or not crons["stop"]:
        raise ValueError("a window needs START and STOP events")
    return {action: _one_cron(action, events) for action, events in crons.items()}


def _one_cron(action: str, events: set[tuple[str, str, str, str, str]]) -> str:
    """One cron for the events of one action: the same time of day, the weekdays listed."""
    times = {e[:4] for e in events}
    if len(times) != 1:
        raise ValueError(f"the {action.upper()} events fall at different times or dates; "
                         "one cron cannot hold them")
    days = sorted({e[4] for e in events}, key=lambda d: (d != "*", d))
    dow = "*" if "*" in days else _ranges(sorted(int(d) for d in days))
    return " ".join((*times.pop(), dow))


def _ranges(days: list[int]) -> str:
    """``[1, 2, 3, 5]`` → ``"1-3,5"``."""
    parts: list[str] = []
    start = previous = days[0]
    for day in [*days[1:], None]:
        if day is not None and day == previous + 1:
            previous = day
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if day is not None:
            start = previous = day
    return ",".join(parts)
