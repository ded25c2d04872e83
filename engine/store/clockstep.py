"""Carrying the stored times across a step of an SQLite file's clock (docs/architecture.md,
"Which clock decides what").

The daemons of a file keep in ``clock_frame`` the wall time at which this boot's monotonic
clock read 0; the first daemon to read another value moves the stored times by the
difference, once, in the transaction that records it.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Column, Table, bindparam, delete, select, update

from engine.clock import as_utc
from engine.store.models import clock_frame, daemon, item_breaker, lease, message_header
from engine.store.statuses import Status

if TYPE_CHECKING:
    from engine.store.sql import SqlStore

__all__ = ["frame_settled", "settle_clock_frame"]


def frame_settled(store: SqlStore, *, boot: str, zero_at: datetime, tolerance: float) -> bool:
    """True when the file's frame for boot ``boot`` is within ``tolerance`` of ``zero_at``."""
    with store.db.read() as conn:
        stored = conn.execute(select(clock_frame.c.zero_at)
                              .where(clock_frame.c.boot == boot)).scalar()
    return stored is not None and abs((as_utc(zero_at) - as_utc(stored)).total_seconds()) \
        <= tolerance


def settle_clock_frame(store: SqlStore, *, boot: str, zero_at: datetime, tolerance: float,
                       lease_seconds: float) -> tuple[float, dict[str, int]]:
    """Record that boot ``boot``'s monotonic clock read 0 at ``zero_at``, first moving the
    stored times by a step of more than ``tolerance`` seconds. Returns the step (0.0: none)
    and the rows moved by kind. Leases and heartbeats move by a forward step only, so a
    daemon that has not yet seen the step never takes a live claim for expired."""
    with store.db.tx() as conn:
        stored = conn.execute(select(clock_frame.c.zero_at)
                              .where(clock_frame.c.boot == boot)).scalar()
        if stored is None:  # a new boot: a new monotonic origin
            conn.execute(delete(clock_frame))
            conn.execute(clock_frame.insert().values(boot=boot, zero_at=zero_at))
            return 0.0, {}
        step = as_utc(zero_at) - as_utc(stored)
        if abs(step.total_seconds()) <= tolerance:
            return 0.0, {}
        conn.execute(update(clock_frame).where(clock_frame.c.boot == boot)
                     .values(zero_at=zero_at))
        return step.total_seconds(), _carry(conn, step, lease_seconds)


def _carry(conn: Any, step: timedelta, lease_seconds: float) -> dict[str, int]:
    h = message_header.c
    forward = max(step, timedelta())
    carried: dict[str, int] = {}
    unfinished = h.status.in_([Status.QUEUED, Status.DELIVERED])
    carried["retries"] = _shift(conn, message_header, h.next_attempt_at, step, unfinished)
    carried["first attempts"] = _shift(conn, message_header, h.first_attempt_at, step,
                                       unfinished)
    carried["claims"] = _shift(conn, message_header, h.lease_expires_at, forward,
                               h.status == Status.DELIVERED)
    carried["leases"] = _shift(conn, lease, lease.c.expires_at, forward, None)
    carried["heartbeats"] = _shift(conn, daemon, daemon.c.heartbeat_at, forward, None)
    carried["breakers"] = _shift(conn, item_breaker, item_breaker.c.open_until, step, None)
    return carried


def _shift(conn: Any, table: Table, column: Column[Any], step: timedelta, where: Any) -> int:
    """Move ``column`` by ``step`` in the rows of ``table`` matching ``where``."""
    key = next(iter(table.primary_key.columns))
    query = select(key, column).where(column.is_not(None))
    rows = conn.execute(query if where is None else query.where(where)).all()
    if rows and step:
        conn.execute(update(table).where(key == bindparam("_key"))
                     .values({column.name: bindparam("_value")}),
                     [{"_key": k, "_value": value + step} for k, value in rows])
    return len(rows) if step else 0
