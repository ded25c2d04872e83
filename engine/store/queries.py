"""Read-only queries for the command line (``encore log``, ``messages``, ``status``)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select

from engine.clock import as_utc
from engine.store.eventlog import LifeStep
from engine.store.models import daemon, event_log, message_header
from engine.store.sql import SqlStore
from engine.store.statuses import FINAL_STATUSES, Status

LISTING_CHUNK = 1_000  # rows one read of a listing of every row (--all) takes at most


@dataclass(frozen=True, kw_only=True)
class EventFilter:
    """Which events to read; None (False) leaves a criterion out. ``limit``: the newest so
    many (:func:`events`)."""

    type: str | None = None
    item: str | None = None
    message_id: int | None = None
    session_id: int | None = None
    since: datetime | None = None
    after_id: int | None = None
    limit: int | None = None
    lifecycle: bool = False  # only the production's life (:class:`LifeStep`)

    def conditions(self) -> list[ColumnElement[bool]]:
        """The conditions on ``event_log`` this filter stands for (not ``limit``)."""
        c = event_log.c
        found: list[ColumnElement[bool]] = [
            column == value for column, value in
            ((c.type, self.type), (c.config_name, self.item), (c.message_id, self.message_id),
             (c.session_id, self.session_id)) if value is not None]
        if self.since is not None:
            found.append(c.time_logged >= self.since)
        if self.after_id is not None:
            found.append(c.id > self.after_id)
        if self.lifecycle:
            found.append(c.source_method.in_([str(step) for step in LifeStep]))
        return found

    def where(self, query: Select[Any]) -> Select[Any]:
        """``query`` (of ``event_log``) narrowed to the events this filter matches."""
        return query.where(*self.conditions())


def events(store: SqlStore, flt: EventFilter) -> list[dict[str, Any]]:
    """Events matching ``flt``, oldest first (the newest ``limit`` ones when limited)."""
    c = event_log.c
    query = flt.where(select(event_log)).order_by(c.id.desc())
    if flt.limit:
        query = query.limit(flt.limit)
    with store.db.read() as conn:
        rows = [plain(r) for r in conn.execute(query).mappings()]
    return rows[::-1]


def iter_events(store: SqlStore, flt: EventFilter, *, up_to: int | None = None,
                chunk: int = LISTING_CHUNK) -> Iterator[dict[str, Any]]:
    """Every event matching ``flt`` (``limit`` aside) with an id up to ``up_to``, oldest
    first, read ``chunk`` rows at a time."""
    c, after = event_log.c, flt.after_id or 0
    while True:
        query = replace(flt, after_id=after).where(select(event_log))
        rows = _chunk(store, query, c.id, up_to, chunk)
        yield from rows
        if len(rows) < chunk:
            return
        after = rows[-1]["id"]


def iter_messages(store: SqlStore, *, status: str | None = None, item: str | None = None,
                  session_id: int | None = None, up_to: int | None = None,
                  chunk: int = LISTING_CHUNK) -> Iterator[dict[str, Any]]:
    """Every matching message header up to id ``up_to``, oldest first, by chunks."""
    c, after = message_header.c, 0
    while True:
        query = _messages_where(status, item, session_id).where(c.id > after)
        rows = _chunk(store, query, c.id, up_to, chunk)
        yield from rows
        if len(rows) < chunk:
            return
        after = rows[-1]["id"]


def _chunk(store: SqlStore, query: Select[Any], key: Any, up_to: int | None,
           chunk: int) -> list[dict[str, Any]]:
    if up_to is not None:
        query = query.where(key <= up_to)
    with store.db.read() as conn:
        return [plain(r) for r in conn.execute(query.order_by(key).limit(chunk)).mappings()]


def _messages_where(status: str | None, item: str | None,
                    session_id: int | None) -> Select[Any]:
    c = message_header.c
    query = select(message_header)
    for column, value in ((c.status, status), (c.target, item), (c.session_id, session_id)):
        if value is not None:
            query = query.where(column == value)
    return query


def messages(store: SqlStore, *, status: str | None = None, item: str | None = None,
             session_id: int | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Message headers, oldest first (the newest ``limit`` ones when limited)."""
    c = message_header.c
    query = _messages_where(status, item, session_id).order_by(c.id.desc())
    if limit:
        query = query.limit(limit)
    with store.db.read() as conn:
        rows = [plain(r) for r in conn.execute(query).mappings()]
    return rows[::-1]


def queue_stats(store: SqlStore) -> dict[str, dict[str, Any]]:
    """Per item: queued count, oldest queued time, messages in retry, last error text."""
    c = message_header.c
    with store.db.read() as conn:
        queued = conn.execute(
            select(c.target, func.count(), func.min(c.time_created))
            .where(c.kind == "request", c.status.in_((Status.QUEUED, Status.DELIVERED)))
            .group_by(c.target)).all()
        retrying: dict[str, int] = dict(conn.execute(
            select(c.target, func.count()).where(c.retry_needed.is_(True),
                                                 c.status.not_in(FINAL_STATUSES))
            .group_by(c.target)).all())
        errors = conn.execute(
            select(event_log.c.config_name, event_log.c.text, event_log.c.time_logged)
            .where(event_log.c.type == "Error").order_by(event_log.c.id.desc()).limit(200)).all()
    stats: dict[str, dict[str, Any]] = {}
    for target, count, oldest in queued:
        stats.setdefault(target, {})
        stats[target].update(queued=count, oldest=as_utc(oldest))
    for target, count in retrying.items():
        stats.setdefault(target, {})["retrying"] = count
    for name, text, when in errors:
        if name is not None:
            stats.setdefault(name, {}).setdefault("last_error", (as_utc(when), text))
    return stats


def daemons(store: SqlStore) -> list[dict[str, Any]]:
    with store.db.read() as conn:
        return [plain(r) for r in conn.execute(select(daemon).order_by(daemon.c.started_at))
                .mappings()]


def plain(row: Any) -> dict[str, Any]:
    """A result row as a dict, its times aware UTC."""
    return {k: as_utc(v) if isinstance(v, datetime) else v for k, v in row.items()}
