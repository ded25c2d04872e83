"""Read-only queries of the management portal: the Message Viewer, the event log, a
message with its attempts and events, a session for the Visual Trace, the production.

Lists are keyset-paged, newest first: a page is ``WHERE id < :before ORDER BY id DESC LIMIT
n`` (or ``id > :after`` going back), never ``OFFSET``, so page 1,000 costs what page 1 does.
Each filter is one that an index of :mod:`engine.store.models` serves — target (with status),
session, message — except ``q``, a text search in bodies and errors, which reads rows
backwards from the cursor until the page is full.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, or_, select

from engine.clock import as_utc
from engine.store.models import (FINAL_STATUSES, daemon, event_log, item_breaker, lease,
                                 message_attempt, message_header)
from engine.store.queries import _plain
from engine.store.rows import AttemptRow
from engine.store.sql import SqlStore

PAGE_SIZE = 50  # rows per page of the Message Viewer and the event log
MAX_PAGE_SIZE = 500  # the largest page a client may ask for
RESENDABLE = (*FINAL_STATUSES, "Suspended")  # as engine.store.operator.RESENDABLE_STATUSES

# The Message Viewer lists headers only; bodies are read one message at a time.
_LIST_COLUMNS = ("id", "session_id", "source", "target", "kind", "status", "is_error",
                 "error_text", "time_created", "time_completed", "attempts", "retry_needed",
                 "corresponding_id")


@dataclass(frozen=True, kw_only=True)
class MessageFilter:
    """What the Message Viewer shows; None (or False) leaves a criterion out.

    ``errors``: only messages that ended in ``Error``. ``q``: text found in the body or the
    error text (case-insensitive). ``since``/``until``: ``time_created`` bounds, inclusive
    and exclusive."""

    target: str | None = None
    status: str | None = None
    session_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    q: str | None = None
    errors: bool = False


@dataclass(frozen=True, kw_only=True)
class EventFilter:
    """What the event log page shows (``item`` is the config name)."""

    type: str | None = None
    item: str | None = None
    message_id: int | None = None
    since: datetime | None = None


@dataclass(frozen=True)
class Page:
    """One page of rows, newest first, with the cursors of its neighbours: ``older`` is the
    ``before`` of the next page (None: this is the last), ``newer`` the ``after`` of the
    previous one (None: this is the first)."""

    rows: list[dict[str, Any]]
    older: int | None = None
    newer: int | None = None


# -- the Message Viewer ----------------------------------------------------------------
def messages_page(store: SqlStore, flt: MessageFilter, *, before: int | None = None,
                  after: int | None = None, limit: int = PAGE_SIZE) -> Page:
    """The page of messages matching ``flt`` just older than id ``before`` (or just newer
    than id ``after``; neither: the newest), newest first."""
    h = message_header.c
    query = _message_where(select(*(h[name] for name in _LIST_COLUMNS)), flt)
    return _keyset(store, query, h.id, before=before, after=after, limit=limit)


def count_messages(store: SqlStore, flt: MessageFilter, *, resendable: bool = False) -> int:
    """How many messages match ``flt`` (``resendable``: only requests an operator may
    resend: finished or suspended)."""
    query = _message_where(select(func.count()).select_from(message_header), flt)
    if resendable:
        query = _resendable(query)
    with store.read() as conn:
        return int(conn.execute(query).scalar_one())


def resendable_ids(store: SqlStore, flt: MessageFilter, *, limit: int) -> list[int]:
    """Ids of the requests matching ``flt`` that may be resent, oldest first, at most
    ``limit``."""
    h = message_header.c
    query = _resendable(_message_where(select(h.id), flt)).order_by(h.id).limit(limit)
    with store.read() as conn:
        return list(conn.execute(query).scalars())


def _resendable(query: Select[Any]) -> Select[Any]:
    h = message_header.c
    return query.where(h.kind == "request", h.status.in_(RESENDABLE))


def _message_where(query: Select[Any], flt: MessageFilter) -> Select[Any]:
    h = message_header.c
    for column, value in ((h.target, flt.target), (h.status, flt.status),
                          (h.session_id, flt.session_id)):
        if value is not None:
            query = query.where(column == value)
    if flt.errors:
        query = query.where(h.status == "Error")
    if flt.since is not None:
        query = query.where(h.time_created >= flt.since)
    if flt.until is not None:
        query = query.where(h.time_created < flt.until)
    if flt.q:
        query = query.where(or_(h.body.icontains(flt.q, autoescape=True),
                                h.error_text.icontains(flt.q, autoescape=True)))
    return query


# -- one message, one session ------------------------------------------------------------
def message(store: SqlStore, message_id: int) -> dict[str, Any] | None:
    """Every column of message ``message_id``, or None."""
    with store.read() as conn:
        row = conn.execute(select(message_header).where(message_header.c.id == message_id)
                           ).mappings().first()
    return None if row is None else _plain(row)


def session_messages(store: SqlStore, session_id: int) -> list[dict[str, Any]]:
    """Every message of a session, oldest first."""
    h = message_header.c
    with store.read() as conn:
        return [_plain(r) for r in conn.execute(
            select(message_header).where(h.session_id == session_id).order_by(h.id)).mappings()]


def attempts_of(store: SqlStore, message_ids: Sequence[int]) -> dict[int, list[AttemptRow]]:
    """The attempts of each of ``message_ids``, in order."""
    a = message_attempt.c
    found: dict[int, list[AttemptRow]] = {mid: [] for mid in message_ids}
    if not message_ids:
        return found
    with store.read() as conn:
        for row in conn.execute(select(message_attempt).where(a.message_id.in_(message_ids))
                                .order_by(a.message_id, a.attempt)).mappings():
            found[row["message_id"]].append(AttemptRow.from_mapping(row))
    return found


def events_of(store: SqlStore, message_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The events written about any of ``message_ids``, oldest first (by the message index,
    not by session: ``event_log.session_id`` has no index)."""
    e = event_log.c
    if not message_ids:
        return []
    with store.read() as conn:
        return [_plain(r) for r in conn.execute(
            select(event_log).where(e.message_id.in_(message_ids)).order_by(e.id)).mappings()]


# -- the event log -----------------------------------------------------------------------
def events_page(store: SqlStore, flt: EventFilter, *, before: int | None = None,
                after: int | None = None, limit: int = PAGE_SIZE) -> Page:
    """The page of events matching ``flt``, newest first (cursors as :func:`messages_page`)."""
    e = event_log.c
    query = select(event_log)
    for column, value in ((e.type, flt.type), (e.config_name, flt.item),
                          (e.message_id, flt.message_id)):
        if value is not None:
            query = query.where(column == value)
    if flt.since is not None:
        query = query.where(e.time_logged >= flt.since)
    return _keyset(store, query, e.id, before=before, after=after, limit=limit)


# -- the production ----------------------------------------------------------------------
@dataclass
class ItemStatus:
    """One item's queue as the portal's front page shows it."""

    queued: int = 0
    in_flight: int = 0
    retrying: int = 0
    oldest_queued: datetime | None = None
    last_error: dict[str, Any] | None = None  # time_logged, text, message_id
    breaker: dict[str, Any] | None = None  # state, failures, open_until


@dataclass
class ProductionStatus:
    items: dict[str, ItemStatus] = field(default_factory=dict)
    daemons: list[dict[str, Any]] = field(default_factory=list)
    leases: dict[str, str] = field(default_factory=dict)  # lease name -> owner, unexpired


def production_status(store: SqlStore, items: Sequence[str], *,
                      now: datetime) -> ProductionStatus:
    """The queues of ``items`` (a few indexed queries each), every registered daemon, and
    the leases unexpired at ``now`` (read only: no write lock, even on SQLite)."""
    status = ProductionStatus()
    with store.read() as conn:
        status.leases = {r.name: r.owner for r in conn.execute(
            select(lease.c.name, lease.c.owner, lease.c.expires_at))
            if as_utc(r.expires_at) >= now}
        breakers = {r["config_name"]: _plain(r)
                    for r in conn.execute(select(item_breaker)).mappings()}
        for name in items:
            one = status.items[name] = _item_status(conn, name)
            one.breaker = breakers.get(name)
        status.daemons = [_plain(r) for r in conn.execute(
            select(daemon).order_by(daemon.c.started_at)).mappings()]
    return status


def _item_status(conn: Any, name: str) -> ItemStatus:
    """One item's queue from indexes only, whatever the size of ``message_header``: the
    counts from the queue index (target, status, id), the oldest queued message as the
    lowest queued id, the retrying ones from the partial index of due times (a parked retry
    has ``next_attempt_at``) and among the few in flight."""
    h, e = message_header.c, event_log.c
    one = ItemStatus()
    for state, count in conn.execute(
            select(h.status, func.count()).where(h.target == name,
                                                 h.status.in_(("Queued", "Delivered")))
            .group_by(h.status)):
        if state == "Queued":
            one.queued = count
        else:
            one.in_flight = count
    if one.queued:
        one.oldest_queued = as_utc(conn.execute(
            select(h.time_created).where(h.target == name, h.status == "Queued")
            .order_by(h.id).limit(1)).scalar())
    if one.queued or one.in_flight:  # parked until their next attempt, and those in flight
        one.retrying = int(conn.execute(select(func.count()).where(
            h.target == name, h.retry_needed.is_(True), or_(
                (h.status == "Queued") & h.next_attempt_at.is_not(None),
                h.status == "Delivered"))).scalar_one())
    error = conn.execute(select(e.time_logged, e.text, e.message_id).where(
        e.config_name == name, e.type == "Error").order_by(e.time_logged.desc()).limit(1)
    ).mappings().first()
    one.last_error = None if error is None else _plain(error)
    return one


# -- reading -----------------------------------------------------------------------------


# -- paging ------------------------------------------------------------------------------
def _keyset(store: SqlStore, query: Select[Any], key: Any, *, before: int | None,
            after: int | None, limit: int) -> Page:
    """Rows of ``query`` newest first by ``key``, one page from a cursor; one extra row is
    read to tell whether there is a page beyond."""
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    going_back = after is not None and before is None
    if going_back:
        query = query.where(key > after).order_by(key.asc())
    else:
        if before is not None:
            query = query.where(key < before)
        query = query.order_by(key.desc())
    with store.read() as conn:
        rows = [_plain(r) for r in conn.execute(query.limit(limit + 1)).mappings()]
    more = len(rows) > limit
    rows = rows[:limit]
    if going_back:
        rows.reverse()
        return Page(rows, older=rows[-1]["id"] if rows else None,
                    newer=rows[0]["id"] if more and rows else None)
    return Page(rows, older=rows[-1]["id"] if more and rows else None,
                newer=rows[0]["id"] if before is not None and rows else None)


__all__ = ["EventFilter", "ItemStatus", "MessageFilter", "Page", "ProductionStatus",
           "attempts_of", "count_messages", "events_of", "events_page", "message",
           "messages_page", "production_status", "resendable_ids",
           "session_messages"]
