"""The Visual Trace's time axis: linear, but every idle stretch over :data:`BREAK_SECONDS` is
cut out as a labelled break (a session may span days while attempts last milliseconds), and
consecutive instants stand at least :data:`MIN_STEP` pixels apart.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

BREAK_SECONDS = 5.0  # an idle stretch longer than this is drawn as a break
BREAK_HEIGHT = 34.0  # px a break takes, whatever its length
BREAK_MARGIN = 40.0  # px before a break: room for the labels of what ended just before it
MIN_STEP = 5.0  # px between two consecutive instants at least
ROW = 34.0  # px before an instant that carries a label (a message arrow) at least
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
    """Maps a time to its y: through ``knots`` (time, y), linearly between two, at
    ``px_per_second`` before the first and after the last; a time inside a break is at the
    break's middle."""

    origin: datetime
    px_per_second: float
    top: float
    breaks: tuple[Break, ...] = field(default=())
    knots: tuple[tuple[datetime, float], ...] = field(default=())

    def y(self, when: datetime | None) -> float:
        if when is None or not self.knots:
            return self.top
        times = [t for t, _ in self.knots]
        i = bisect_left(times, when)
        if i < len(times) and times[i] == when:
            return self.knots[i][1]
        if i == 0:
            return round(self.top - (times[0] - when).total_seconds() * self.px_per_second, 1)
        if i == len(times):
            (last, y), = self.knots[-1:]
            return round(y + (when - last).total_seconds() * self.px_per_second, 1)
        (t0, y0), (t1, y1) = self.knots[i - 1], self.knots[i]
        for b in self.breaks:
            if b.start <= t0 and t1 <= b.end:  # inside a break: its middle
                return round(b.y + BREAK_HEIGHT / 2, 1)
        return round(y0 + (y1 - y0) * (when - t0) / (t1 - t0), 1)


def time_axis(instants: Iterable[datetime], busy: Iterable[tuple[datetime, datetime]], *,
              top: float, labelled: Iterable[datetime] = ()) -> TimeAxis:
    """The axis for a session whose ``instants`` (message, attempt and event times) are
    drawn, with ``busy`` intervals (attempts in flight) that are never cut; ``labelled``:
    the instants that carry a label and need a :data:`ROW` above them."""
    times = sorted(set(instants))
    if not times:
        return TimeAxis(datetime.min, 1.0, top)
    idle = dict(_idle_stretches(times, sorted(busy)))  # start -> end
    skipped = sum((end - start).total_seconds() for start, end in idle.items())
    span = (times[-1] - times[0]).total_seconds() - skipped
    scale = min(MAX_SCALE, TARGET_HEIGHT / span) if span > 0 else MAX_SCALE
    rows = set(labelled)
    knots, breaks, y = [(times[0], top)], [], top
    for before, after in zip(times, times[1:]):
        start = next((s for s in idle if before <= s < after), None)
        if start is not None:  # the stretch from `start` to `after` is cut out
            y += (start - before).total_seconds() * scale
            if start > before:
                knots.append((start, round(y, 1)))
            breaks.append(Break(start, after, round(y + BREAK_MARGIN, 1)))
            y += BREAK_MARGIN + BREAK_HEIGHT + MIN_STEP
        else:
            y += max((after - before).total_seconds() * scale,
                     ROW if after in rows else MIN_STEP)
        knots.append((after, round(y, 1)))
    return TimeAxis(times[0], scale, top, tuple(breaks), tuple(knots))


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
