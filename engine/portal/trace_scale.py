"""The Visual Trace's time axis: linear, except where nothing happens for long.

A session may span minutes or days (a resend long after the first try) while its attempts
last milliseconds; one linear scale would crush them into one line. So every stretch longer
than :data:`BREAK_SECONDS` in which no attempt is in flight and nothing is logged is cut out
and drawn as a *break* of :data:`BREAK_HEIGHT` pixels labelled with its length; the rest of
the time line keeps one linear scale, fitted to :data:`TARGET_HEIGHT` (and never stretched
past :data:`MAX_SCALE`).
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

BREAK_SECONDS = 5.0  # an idle stretch longer than this is drawn as a break
BREAK_HEIGHT = 34.0  # px a break takes, whatever its length
TARGET_HEIGHT = 560.0  # px the busy part of the time line is scaled to
MAX_SCALE = 400.0  # px per second: short sessions are not stretched past it


@dataclass(frozen=True)
class Break:
    """Time skipped: from ``start`` to ``end``, drawn from ``y`` for BREAK_HEIGHT px."""

    start: datetime
    end: datetime
    y: float

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True)
class TimeAxis:
    """Maps a time to its y: ``top`` at ``origin``, ``px_per_second`` within stretches,
    ``BREAK_HEIGHT`` per break crossed."""

    origin: datetime
    px_per_second: float
    top: float
    breaks: tuple[Break, ...] = field(default=())

    def y(self, when: datetime | None) -> float:
        if when is None:
            return self.top
        starts = [b.start for b in self.breaks]
        index = bisect_left(starts, when)  # breaks that begin before `when`
        y, since = self.top, self.origin
        for b in self.breaks[:index]:
            if when < b.end:  # inside a break: its middle
                return round(b.y + BREAK_HEIGHT / 2, 1)
            y += (b.start - since).total_seconds() * self.px_per_second + BREAK_HEIGHT
            since = b.end
        return round(y + (when - since).total_seconds() * self.px_per_second, 1)


def time_axis(instants: Iterable[datetime], busy: Iterable[tuple[datetime, datetime]], *,
              top: float) -> TimeAxis:
    """The axis for a session whose ``instants`` (message, attempt and event times) are
    drawn, with ``busy`` intervals (attempts in flight) that are never cut."""
    times = sorted(set(instants))
    if not times:
        return TimeAxis(datetime.min, 1.0, top)
    idle = _idle_stretches(times, sorted(busy))
    skipped = sum((end - start).total_seconds() for start, end in idle)
    span = (times[-1] - times[0]).total_seconds() - skipped
    scale = min(MAX_SCALE, TARGET_HEIGHT / span) if span > 0 else MAX_SCALE
    breaks, y, since = [], top, times[0]
    for start, end in idle:
        y += (start - since).total_seconds() * scale
        breaks.append(Break(start, end, round(y, 1)))
        y += BREAK_HEIGHT
        since = end
    return TimeAxis(times[0], scale, top, tuple(breaks))


def _idle_stretches(times: Sequence[datetime], busy: Sequence[tuple[datetime, datetime]]
                    ) -> list[tuple[datetime, datetime]]:
    """Gaps between consecutive instants longer than BREAK_SECONDS that no busy interval
    overlaps (trimmed to what is left of them)."""
    limit = timedelta(seconds=BREAK_SECONDS)
    stretches = []
    for before, after in zip(times, times[1:]):
        if after - before <= limit:
            continue
        start = before
        for b_start, b_end in busy:
            if b_start < after and b_end > start:  # in flight during the gap
                start = max(start, b_end)
        if after - start > limit:
            stretches.append((start, after))
    return stretches


def duration_text(seconds: float) -> str:
    """``4 min 12 s``, ``2 h 5 min``, ``3 d 4 h``, ``12.5 s``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"
