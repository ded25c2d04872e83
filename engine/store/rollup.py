"""Per-item, per-minute counters (docs/portal.md), so an item's page reads no
``message_header``.

Each daemon counts in memory and flushes changed minutes every :data:`FLUSH_INTERVAL` seconds,
replacing its own row per (item, minute, daemon): no read-modify-write, no contention, and a
failed flush is simply redone. Attempt times go into the fixed histogram :data:`BUCKETS_MS`.
"""
from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite

from engine.clock import as_utc
from engine.store.models import ROLLUP_COUNTS, item_minute
from engine.store.sql import SqlStore

FLUSH_INTERVAL = 2.0
KEEP_DAYS = 2
OUTCOMES = ("ok", "timeout", "connect_error", "reset", "http_status", "fault", "error")
# upper bounds (ms); a last bucket takes the rest
BUCKETS_MS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000,
                                 10_000, 30_000, 60_000, 120_000)


def minute_of(moment: datetime) -> datetime:
    """The start of ``moment``'s minute, in UTC."""
    return as_utc(moment).replace(second=0, microsecond=0)


@dataclass
class Minute:
    """One item's counts in one minute."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROLLUP_COUNTS, 0))
    histogram: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_MS) + 1))
    attempt_ms_total: float = 0.0

    def add(self, other: Minute) -> None:
        for key, value in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + value
        self.histogram = [a + b for a, b in zip(self.histogram, other.histogram)]
        self.attempt_ms_total += other.attempt_ms_total

    @property
    def attempts(self) -> int:
        return sum(self.counts[o] for o in OUTCOMES)

    @property
    def failed(self) -> int:
        return self.attempts - self.counts["ok"]


class RollupCounter:
    """A daemon's counts by (item, minute) since its last flush, and the minutes not yet
    over; a count is a lookup and an addition under an uncontended lock."""

    def __init__(self, clock: Any) -> None:
        """``clock``: the daemon's."""
        self._clock = clock
        self._lock = threading.Lock()
        self._minutes: dict[tuple[str, datetime], Minute] = {}
        self._dirty: set[tuple[str, datetime]] = set()  # minutes before the current one
        self._minute: datetime | None = None
        self._until = float("-inf")  # monotonic end of the current minute
        self._current: dict[str, Minute] = {}
        self._dirty_now: set[str] = set()
        self.last_outcome: dict[str, str] = {}

    def _roll(self) -> None:
        """Start the minute of now."""
        now, mono = as_utc(self._clock.now()), self._clock.monotonic()
        if self._minute is not None:
            self._dirty.update((item, self._minute) for item in self._dirty_now)
        self._minute = minute_of(now)
        self._until = mono + 60.0 - (now.second + now.microsecond / 1e6)
        self._current, self._dirty_now = {}, set()

    def _one(self, item: str) -> Minute:
        if self._clock.monotonic() >= self._until:
            self._roll()
        one = self._current.get(item)
        if one is None:
            assert self._minute is not None
            one = self._current[item] = self._minutes.setdefault((item, self._minute),
                                                                  Minute())
        self._dirty_now.add(item)
        return one

    def attempt(self, item: str, outcome: str, seconds: float, number: int) -> None:
        """One attempt of ``item`` ended with ``outcome`` after ``seconds``."""
        ms = seconds * 1000.0 if seconds > 0 else 0.0
        key = outcome if outcome in OUTCOMES else "error"
        bucket = bisect.bisect_left(BUCKETS_MS, ms)
        with self._lock:
            one = self._one(item)
            counts = one.counts
            counts[key] += 1
            if number > 1:
                counts["retries"] += 1
            one.histogram[bucket] += 1
            one.attempt_ms_total += ms
            self.last_outcome[item] = key

    def completed(self, item: str) -> None:
        with self._lock:
            self._one(item).counts["completed"] += 1

    def gave_up(self, item: str) -> None:
        with self._lock:
            self._one(item).counts["give_ups"] += 1

    def take_dirty(self) -> dict[tuple[str, datetime], Minute]:
        """Copies of the minutes changed since the last call; forget those over."""
        with self._lock:
            if self._clock.monotonic() >= self._until:
                self._roll()
            keys = set(self._dirty)
            if self._minute is not None:
                keys.update((item, self._minute) for item in self._dirty_now)
            dirty = {k: _copy(self._minutes[k]) for k in keys}
            self._dirty, self._dirty_now = set(), set()
            for key in [k for k in self._minutes if k[1] != self._minute]:
                del self._minutes[key]
        return dirty

    def put_back(self, minutes: Iterable[tuple[str, datetime]]) -> None:
        """A flush failed: write these again next time."""
        with self._lock:
            self._dirty.update(k for k in minutes if k in self._minutes)


def _copy(one: Minute) -> Minute:
    return Minute(dict(one.counts), list(one.histogram), one.attempt_ms_total)


def flush(store: SqlStore, counter: RollupCounter, daemon_id: str, *,
          prune_before: datetime | None = None) -> int:
    """Write the changed minutes in one transaction; return how many. ``prune_before``:
    also delete older rows. On failure the minutes stay to write."""
    dirty = counter.take_dirty()
    if not dirty and prune_before is None:
        return 0
    try:
        with store.db.tx(durable=False) as conn:
            for (item, minute), one in sorted(dirty.items(), key=lambda kv: kv[0]):
                values = {"config_name": item, "minute": minute, "daemon_id": daemon_id,
                          **one.counts, "attempt_ms_total": one.attempt_ms_total,
                          "histogram": json.dumps(one.histogram)}
                conn.execute(_upsert(store, values))
            if prune_before is not None:
                conn.execute(delete(item_minute).where(item_minute.c.minute < prune_before))
    except Exception:
        counter.put_back(dirty)
        raise
    return len(dirty)


def _upsert(store: SqlStore, values: Mapping[str, Any]) -> Any:
    insert: Any = postgresql.insert if store.is_postgres else sqlite.insert
    statement = insert(item_minute).values(**values)
    keys = ("config_name", "minute", "daemon_id")
    return statement.on_conflict_do_update(
        index_elements=list(keys),
        set_={k: statement.excluded[k] for k in values if k not in keys})


@dataclass
class ItemRollup:
    """An item's totals of the last hour and day, and its last hour per minute."""

    hour: Minute
    day: Minute
    per_minute: list[tuple[datetime, Minute]]

    def counters(self, span: Minute) -> dict[str, Any]:
        counts = span.counts
        return {"attempts": span.attempts,
                "attempts_by_outcome": {o: counts[o] for o in OUTCOMES},
                "completed": counts["completed"], "errors": span.failed,
                "retries": counts["retries"], "give_ups": counts["give_ups"],
                "latency_ms": latency(span)}


def latency(span: Minute) -> dict[str, float | None]:
    """p50 and p95 of ``span``'s attempt times, as bucket upper bounds."""
    total = sum(span.histogram)
    found: dict[str, float | None] = {"p50": None, "p95": None}
    if not total:
        return found
    for name, share in (("p50", 0.50), ("p95", 0.95)):
        rank, seen = share * total, 0
        for index, count in enumerate(span.histogram):
            seen += count
            if seen >= rank:
                found[name] = float(BUCKETS_MS[index]) if index < len(BUCKETS_MS) else \
                    float(BUCKETS_MS[-1]) * 2
                break
    return found


def item_rollup(store: SqlStore, item: str, *, now: datetime) -> ItemRollup:
    """The rollup of ``item``: every daemon's rows of the last 24 hours, summed."""
    m = item_minute.c
    now = as_utc(now)
    hour_start, day_start = minute_of(now - timedelta(minutes=59)), now - timedelta(hours=24)
    hour, day = Minute(), Minute()
    by_minute: dict[datetime, Minute] = {}
    with store.db.read() as conn:
        for row in conn.execute(select(item_minute).where(
                m.config_name == item, m.minute >= day_start)).mappings():
            one = Minute({k: int(row[k]) for k in ROLLUP_COUNTS},
                         _histogram(row["histogram"]), float(row["attempt_ms_total"]))
            day.add(one)
            minute = as_utc(row["minute"]).astimezone(UTC)
            if minute >= hour_start:
                hour.add(one)
                by_minute.setdefault(minute, Minute()).add(one)
    series = [(hour_start + timedelta(minutes=i),
               by_minute.get(hour_start + timedelta(minutes=i), Minute())) for i in range(60)]
    return ItemRollup(hour, day, series)


def _histogram(text: str | None) -> list[int]:
    size = len(BUCKETS_MS) + 1
    try:
        values = [int(v) for v in json.loads(text or "[]")][:size]
    except (ValueError, TypeError):
        values = []
    return values + [0] * (size - len(values))
