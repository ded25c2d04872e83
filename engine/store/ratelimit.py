"""Rate-limit token buckets in the ``item_rate`` table, shared by every daemon (docs/guards.md).

:meth:`SqlRateBuckets.take` is one ``UPDATE … RETURNING`` that refills, takes a token and may
go below zero: a negative count is a queue of reserved slots, so the caller knows its wait
and nobody polls. It runs non-durably on the hot path's connections.
"""
from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.dialects import postgresql, sqlite

from engine.store.models import item_rate

if TYPE_CHECKING:
    from engine.store.connector import Database

__all__ = ["SqlRateBuckets"]

_TAKE_POSTGRES = """
UPDATE item_rate SET
  tokens = LEAST(%(capacity)s, tokens + GREATEST(
      EXTRACT(EPOCH FROM (%(now)s::timestamptz - refilled_at))::float8, 0) * %(rate)s) - 1,
  refilled_at = GREATEST(refilled_at, %(now)s::timestamptz)
WHERE config_name = %(item)s
RETURNING tokens"""

# SQLite times are naive UTC text: max() is the later; seconds and fraction are subtracted
# apart, exactly (julianday() is off by up to 40 µs)
_SQLITE_ELAPSED = ("((strftime('%s', :now) - strftime('%s', refilled_at))"
                   " + (CAST(substr(:now, 20) AS REAL) - CAST(substr(refilled_at, 20) AS REAL)))")
_TAKE_SQLITE = f"""
UPDATE item_rate SET
  tokens = min(:capacity, tokens + max({_SQLITE_ELAPSED}, 0) * :rate) - 1,
  refilled_at = max(refilled_at, :now)
WHERE config_name = :item
RETURNING tokens"""

MIN_WAIT = 1e-6  # seconds: a shorter wait is rounding


class SqlRateBuckets:
    """The ``item_rate`` table of one store (``store.rate_buckets``)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        postgres = db.is_postgres
        self._insert: Any = postgresql.insert if postgres else sqlite.insert
        self._take = _TAKE_POSTGRES if postgres else _TAKE_SQLITE
        self._time = (lambda t: t) if postgres else _sqlite_time

    def ensure(self, item: str, *, capacity: int, now: datetime) -> None:
        """Create ``item``'s bucket, full, unless it exists."""
        stmt = self._insert(item_rate).values(config_name=item, tokens=float(capacity),
                                              refilled_at=now)
        with self._db.tx(durable=False) as conn:
            conn.execute(stmt.on_conflict_do_nothing(index_elements=[item_rate.c.config_name]))

    def take(self, item: str, *, capacity: int, per_second: float, now: datetime) -> float:
        """Take ``item``'s next slot; the seconds from ``now`` until it is due (0: now).
        Creates the bucket, full, if missing."""
        params = {"capacity": float(capacity), "rate": float(per_second),
                  "now": self._time(now), "item": item}
        rows = self._db.hot.execute(self._take, params)
        left = rows[0][0] if rows else None
        if left is None:
            self.ensure(item, capacity=capacity, now=now)
            return self.take(item, capacity=capacity, per_second=per_second, now=now)
        wait = -float(left) / per_second
        return wait if wait >= MIN_WAIT else 0.0

    def tokens(self, item: str) -> float | None:
        """The tokens of ``item``'s bucket as last written (None: no bucket)."""
        with self._db.read() as conn:
            value = conn.execute(item_rate.select().with_only_columns(item_rate.c.tokens)
                                 .where(item_rate.c.config_name == item)).scalar()
        return None if value is None else float(value)


def _sqlite_time(value: datetime) -> str:
    """The text SQLAlchemy stores for an aware datetime on SQLite (naive UTC)."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
