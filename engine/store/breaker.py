"""Circuit breakers in the ``item_breaker`` table, shared by every daemon (docs/guards.md).

Every transition is one conditional ``UPDATE … RETURNING``, so racing daemons agree on who made
it; opening and closing are announced to every daemon.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import case, select, update
from sqlalchemy.dialects import postgresql, sqlite

from engine.clock import as_utc
from engine.store.breaker_row import CLOSED, HALF_OPEN, OPEN, BreakerRow
from engine.store.models import item_breaker
from engine.store.notify import Announcement

if TYPE_CHECKING:
    from engine.store.connector import Database

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "BreakerRow", "SqlBreakers"]

class SqlBreakers:
    """The ``item_breaker`` table of one store (``store.breakers``)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._insert: Any = postgresql.insert if db.is_postgres else sqlite.insert

    def ensure(self, item: str, *, now: datetime) -> None:
        """Create ``item``'s breaker, closed, unless it exists (then it is left as it is)."""
        stmt = self._insert(item_breaker).values(config_name=item, state=CLOSED, failures=0,
                                                 updated_at=now)
        with self._db.tx() as conn:
            conn.execute(stmt.on_conflict_do_nothing(
                index_elements=[item_breaker.c.config_name]))

    def get(self, item: str) -> BreakerRow | None:
        """``item``'s breaker as stored, or None."""
        rows = self._select(select(item_breaker).where(item_breaker.c.config_name == item))
        return _row(rows[0]) if rows else None

    def all(self) -> dict[str, BreakerRow]:
        """Every stored breaker, by item."""
        return {r["config_name"]: _row(r) for r in self._select(select(item_breaker))}

    def _select(self, query: Any) -> list[Any]:
        with self._db.read() as conn:
            return list(conn.execute(query).mappings().all())

    def record_failure(self, item: str, *, threshold: int, open_seconds: float,
                       now: datetime) -> BreakerRow | None:
        """Count one failed attempt of a closed breaker, opening it until ``now +
        open_seconds`` at ``threshold``. The row (``open`` only if this call opened it), or
        None when it was not closed."""
        c = item_breaker.c
        opens = c.failures + 1 >= threshold
        stmt = (update(item_breaker).where(c.config_name == item, c.state == CLOSED)
                .values(failures=c.failures + 1, updated_at=now, version=c.version + 1,
                        state=case((opens, OPEN), else_=CLOSED),
                        open_until=case((opens, now + timedelta(seconds=open_seconds)),
                                        else_=None))
                .returning(*item_breaker.c))
        return self._transition(item, stmt, announce=lambda r: r.state == OPEN)

    def reset_failures(self, item: str, *, now: datetime) -> None:
        """A success: a closed breaker's failure count goes back to 0."""
        c = item_breaker.c
        with self._db.tx(durable=False) as conn:
            conn.execute(update(item_breaker).where(c.config_name == item, c.state == CLOSED,
                                                    c.failures > 0)
                         .values(failures=0, updated_at=now, version=c.version + 1))

    def take_probe(self, item: str, owner: str, *, now: datetime,
                   probe_seconds: float) -> BreakerRow | None:
        """Make ``item``'s breaker half-open with ``owner`` as its probe once ``open_until``
        has passed (or a probe was lost after ``probe_seconds``). The row if ``owner`` got
        it, else None."""
        c = item_breaker.c
        stmt = (update(item_breaker)
                .where(c.config_name == item, c.state.in_((OPEN, HALF_OPEN)),
                       c.open_until <= now)
                .values(state=HALF_OPEN, probe_owner=owner, updated_at=now,
                        version=c.version + 1,
                        open_until=now + timedelta(seconds=probe_seconds))
                .returning(*item_breaker.c))
        return self._transition(item, stmt)

    def close(self, item: str, owner: str, *, now: datetime) -> BreakerRow | None:
        """``owner``'s probe succeeded: close the breaker. None if the probe was not its."""
        c = item_breaker.c
        stmt = (update(item_breaker)
                .where(c.config_name == item, c.state == HALF_OPEN, c.probe_owner == owner)
                .values(state=CLOSED, failures=0, open_until=None, probe_owner=None,
                        updated_at=now, version=c.version + 1)
                .returning(*item_breaker.c))
        return self._transition(item, stmt, announce=lambda r: True)

    def reopen(self, item: str, owner: str, *, now: datetime,
               open_seconds: float) -> BreakerRow | None:
        """``owner``'s probe failed: open the breaker again. None if the probe was not its."""
        c = item_breaker.c
        stmt = (update(item_breaker)
                .where(c.config_name == item, c.state == HALF_OPEN, c.probe_owner == owner)
                .values(state=OPEN, probe_owner=None, updated_at=now,
                        version=c.version + 1,
                        open_until=now + timedelta(seconds=open_seconds))
                .returning(*item_breaker.c))
        return self._transition(item, stmt)

    def _transition(self, item: str, stmt: Any,
                    announce: Any = None) -> BreakerRow | None:
        """Run one transition; announce it when ``announce(row)`` says so."""
        news = [Announcement.breaker(item)]
        with self._db.tx() as conn:
            found = conn.execute(stmt).mappings().first()
            row = _row(found) if found is not None else None
            told = row is not None and announce is not None and announce(row)
            if told:
                self._db.announcer.notify(conn, news)
        if told:
            self._db.announcer.call_back(news)
        return row


def _row(row: Any) -> BreakerRow:
    updated = as_utc(row["updated_at"])
    assert updated is not None
    return BreakerRow(item=row["config_name"], state=row["state"], failures=row["failures"],
                      open_until=as_utc(row["open_until"]), probe_owner=row["probe_owner"],
                      updated_at=updated, version=row["version"])
