"""Listings a reader pages through: what a limited listing left out, an item's queue in
delivery order (docs/portal.md, "Queues"), and the demo's SQL queries."""
from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Table, func, select

from engine.store.models import event_log, message_header
from engine.store.queries import EventFilter, plain
from engine.store.sql import SqlStore
from engine.store.statuses import Status

# what `encore demo` shows, one query a line, to read its messages, attempts and events in SQL
TABLE_QUERIES = """\
  SELECT id, status, attempts, retry_needed, error_text FROM message_header ORDER BY id;
  SELECT message_id, attempt, started_at, ended_at, outcome FROM message_attempt ORDER BY id;
  SELECT time_logged, type, config_name, message_id, text FROM event_log ORDER BY id;"""


def events_left_out(store: SqlStore, flt: EventFilter, oldest_id: int) -> int:
    """How many events matching ``flt`` are older than event ``oldest_id``."""
    return _older(store, event_log, oldest_id, flt.conditions())


def messages_left_out(store: SqlStore, oldest_id: int, *, status: str | None = None,
                      item: str | None = None, session_id: int | None = None) -> int:
    """How many messages matching the given filters are older than ``oldest_id``."""
    h = message_header.c
    return _older(store, message_header, oldest_id, [
        column == value for column, value in
        ((h.status, status), (h.target, item), (h.session_id, session_id)) if value is not None])


def _older(store: SqlStore, table: Table, oldest_id: int,
           where: list[ColumnElement[bool]]) -> int:
    """The rows of ``table`` matching ``where`` whose id is below ``oldest_id``."""
    query = select(func.count()).select_from(table).where(table.c.id < oldest_id, *where)
    with store.db.read() as conn:
        return int(conn.execute(query).scalar_one())


def queued_page(store: SqlStore, item: str, *, after: int | None,
                limit: int) -> tuple[list[dict[str, Any]], int | None]:
    """The queued requests of ``item`` by id after ``after``, at most ``limit``: (rows, the
    next page's ``after`` or None), keyset-paged on the queue index."""
    h = message_header.c
    query = select(h.id, h.session_id, h.source, h.time_created, h.attempts, h.retry_needed,
                   h.next_attempt_at, h.body).where(
        h.target == item, h.status == Status.QUEUED, h.kind == "request")
    if after is not None:
        query = query.where(h.id > after)
    with store.db.read() as conn:
        rows = [plain(r) for r in conn.execute(query.order_by(h.id).limit(limit + 1)).mappings()]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, rows[-1]["id"] if more and rows else None
