"""Read-only queries of the management portal: Message Viewer, event log, one message, a
session, the production.

Lists are keyset-paged (never ``OFFSET``) and filter only on indexed columns, except ``q`` and
``body.PATH``, which read rows from the cursor (a page reads at most :data:`BODY_SCAN_LIMIT`).
On PostgreSQL a list query runs under :data:`SEARCH_TIMEOUT`.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    DateTime,
    Select,
    func,
    literal,
    or_,
    select,
    tuple_,
)

from engine.clock import as_utc
from engine.errors import StoreError
from engine.store import properties
from engine.store.models import (
    daemon,
    event_log,
    item_breaker,
    lease,
    message_attempt,
    message_header,
    message_property,
)
from engine.store.queries import EventFilter, plain
from engine.store.rows import AttemptRow
from engine.store.sql import SqlStore
from engine.store.statuses import ENDED_STATUSES, Status

PAGE_SIZE = 50  # rows per page of the Message Viewer and the event log
MAX_PAGE_SIZE = 500  # the largest page a client may ask for
RESENDABLE = ENDED_STATUSES  # as engine.store.operator.RESENDABLE_STATUSES
BODY_SCAN_LIMIT = 50_000  # rows one page of a body.PATH filter reads at most
BODY_CHUNK = 1_000  # rows read at a time by a body.PATH filter and by an export
SORTS = ("time", "target", "status", "duration")
EXACT_FLOAT_DIGITS = 15  # a numeric value with more digits is compared as text
SEARCH_TIMEOUT = 10.0  # seconds one query of a list may run on PostgreSQL (a page, a count)
_QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE of a statement ended by its timeout
_TOO_COMPLEX = "pattern too complex"  # SQLite's refusal of a LIKE pattern (50,000 bytes)

_LIST_COLUMNS = ("id", "session_id", "source", "target", "kind", "status", "is_error",
                 "error_text", "time_created", "time_completed", "attempts", "retry_needed",
                 "corresponding_id")


class SearchTimedOut(StoreError):
    """A Message Viewer query ran longer than :data:`SEARCH_TIMEOUT` and was stopped."""


class SearchTooComplex(StoreError):
    """The database refused the search as too complex (SQLite: a ``q`` LIKE pattern too long)."""


@contextmanager
def searching(store: SqlStore) -> Iterator[Connection]:
    """A read connection for a list's queries, under :data:`SEARCH_TIMEOUT` on PostgreSQL."""
    try:
        with store.db.read() as conn:
            if store.is_postgres:
                conn.exec_driver_sql(
                    f"SET LOCAL statement_timeout = {round(SEARCH_TIMEOUT * 1000)}")
            yield conn
    except StoreError as exc:
        raise _search_error(exc) from exc


def _search_error(exc: StoreError) -> StoreError:
    cause = getattr(exc.__cause__, "orig", None)
    if getattr(cause, "sqlstate", None) == _QUERY_CANCELED:
        return SearchTimedOut(f"the search took longer than {SEARCH_TIMEOUT:g} s and was "
                              "stopped; narrow it (an item, a status, a time range, a "
                              "search property) and try again")
    if _TOO_COMPLEX in str(cause or ""):
        return SearchTooComplex("the search text is too complex for the database; use a "
                                "shorter one")
    return exc


@dataclass(frozen=True, kw_only=True)
class MessageFilter:
    """What the Message Viewer shows; None (or False) leaves a criterion out.
    ``since``/``until``: ``time_created`` bounds, inclusive and exclusive."""

    target: str | None = None
    status: str | None = None
    session_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    q: str | None = None
    errors: bool = False
    source: str | None = None
    props: tuple[PropertyFilter, ...] = ()
    body: tuple[tuple[str, str], ...] = ()  # (path, value) pairs
    sort: str = "time"
    descending: bool = True


@dataclass(frozen=True)
class PropertyFilter:
    """``prop.PATH=VALUE`` (``op`` "eq"), ``.gt`` or ``.lt``; a numeric value compares as
    a number."""

    path: str
    op: str
    value: str


@dataclass(frozen=True)
class Page:
    """One page of rows with its neighbours' cursors: ``older`` (``before`` of the next
    page) and ``newer`` (``after`` of the previous one); None at either end."""

    rows: list[Any]
    older: int | None = None
    newer: int | None = None
    scanned: int | None = None  # set when the body scan limit stopped the page


def messages_page(store: SqlStore, flt: MessageFilter, *, before: int | None = None,
                  after: int | None = None, limit: int = PAGE_SIZE) -> Page:
    """The page of messages matching ``flt`` before id ``before`` (or after ``after``)."""
    h = message_header.c
    columns = [h[name] for name in _LIST_COLUMNS]
    if flt.body:
        columns.append(h.body)
    query = _message_where(select(*columns), flt)
    key = _sort_key(store, flt.sort)
    if flt.body:
        page = _body_keyset(store, query, flt, key, before=before, after=after, limit=limit)
    else:
        page = _keyset(store, query, h.id, before=before, after=after, limit=limit,
                       sort=key, descending=flt.descending)
    for row in page.rows:
        row.pop("body", None)
        row["duration_ms"] = duration_ms(row)
    return page


def duration_ms(row: dict[str, Any]) -> float | None:
    """Milliseconds from creation to end; None while not done (Suspended is not done)."""
    start, end = row.get("time_created"), row.get("time_completed")
    if start is None or end is None or row.get("status") == Status.SUSPENDED:
        return None
    span: timedelta = end - start
    return round(span.total_seconds() * 1000, 1)


def _sort_key(store: SqlStore, sort: str) -> Any:
    """The expression a sort orders by besides the id; None for time."""
    h = message_header.c
    if sort == "target":
        return h.target
    if sort == "status":
        return h.status
    if sort == "duration":  # not done yet: sorted as the longest
        span: ColumnElement[Any]
        if store.is_postgres:
            span = func.extract("epoch", h.time_completed - h.time_created)
        else:
            span = (func.julianday(h.time_completed) - func.julianday(h.time_created)) * 86400.0
        return func.coalesce(span, literal(1e12))
    return None


def count_messages(store: SqlStore, flt: MessageFilter, *, resendable: bool = False) -> int:
    """How many messages match ``flt`` (``resendable``: only requests that may be resent)."""
    query = _message_where(select(func.count()).select_from(message_header), flt)
    if resendable:
        query = _resendable(query)
    with searching(store) as conn:
        return int(conn.execute(query).scalar_one())


def resendable_ids(store: SqlStore, flt: MessageFilter, *, limit: int) -> list[int]:
    """Ids of the resendable requests matching ``flt``, oldest first, at most ``limit``."""
    h = message_header.c
    query = _resendable(_message_where(select(h.id), flt)).order_by(h.id).limit(limit)
    with searching(store) as conn:
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
        query = query.where(h.status == Status.ERROR)
    if flt.since is not None:
        query = query.where(h.time_created >= flt.since)
    if flt.until is not None:
        query = query.where(h.time_created < flt.until)
    if flt.q:
        query = query.where(or_(h.body.icontains(flt.q, autoescape=True),
                                h.error_text.icontains(flt.q, autoescape=True)))
    if flt.source is not None:
        query = query.where(h.source == flt.source)
    for prop in flt.props:
        query = query.where(h.id.in_(_property_ids(prop)))
    for _, value in flt.body:  # a cheap index-free prefilter before the JSON match
        if value.isascii() and value.replace("-", "").replace(".", "").replace("_", "").isalnum():
            query = query.where(h.body.contains(value, autoescape=True))
    return query


def _property_ids(prop: PropertyFilter) -> Select[Any]:
    """The ids of the messages whose property passes ``prop``."""
    p = message_property.c
    number = properties.as_number(prop.value)
    digits = sum(ch.isdigit() for ch in prop.value)
    column, value = ((p.value_num, number) if number is not None and digits <= EXACT_FLOAT_DIGITS
                     else (p.value_text, prop.value))
    test = {"eq": column == value, "gt": column > value, "lt": column < value}[prop.op]
    return select(p.message_id).where(p.name == prop.path, test)


def _body_matches(body: str | None, wanted: tuple[tuple[str, str], ...]) -> bool:
    """True when JSON ``body`` holds every (path, value), compared as text or number."""
    try:
        document = json.loads(body) if body else None
    except ValueError:
        return False
    for path, value in wanted:
        found, at = properties.lookup(document, path)
        if not found or isinstance(at, (dict, list)):
            return False
        if (properties.as_text(at) if at is not None else "null") != value:
            number = properties.as_number(value)
            if number is None or properties.as_number(at) != number:
                return False
    return True


def _body_keyset(store: SqlStore, query: Select[Any], flt: MessageFilter, key: Any, *,
                 before: int | None, after: int | None, limit: int) -> Page:
    """A page of a body-filtered list, reading at most :data:`BODY_SCAN_LIMIT` rows."""
    h = message_header.c
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    going_back = after is not None and before is None
    kept: list[dict[str, Any]] = []
    scanned, cursor, last_read, more = 0, (after if going_back else before), None, False
    while scanned < BODY_SCAN_LIMIT:
        chunk = _keyset(store, query, h.id, limit=BODY_CHUNK, sort=key, cap=False,
                        descending=flt.descending != going_back,
                        before=cursor, after=None)
        scanned += len(chunk.rows)
        for row in chunk.rows:
            last_read = row["id"]
            if _body_matches(row.get("body"), flt.body):
                kept.append(row)
                if len(kept) > limit:
                    more = True
                    break
        if more or chunk.older is None:
            break
        cursor = chunk.older
    stopped = not more and scanned >= BODY_SCAN_LIMIT
    rows = kept[:limit]
    if going_back:
        rows.reverse()
        return Page(rows, older=rows[-1]["id"] if rows else None,
                    newer=(rows[0]["id"] if rows else last_read) if more or stopped else None,
                    scanned=scanned if stopped else None)
    older = rows[-1]["id"] if more and rows else (last_read if stopped else None)
    return Page(rows, older=older, newer=rows[0]["id"] if before is not None and rows else None,
                scanned=scanned if stopped else None)


def message(store: SqlStore, message_id: int) -> dict[str, Any] | None:
    """Every column of message ``message_id``, or None."""
    with store.db.read() as conn:
        row = conn.execute(select(message_header).where(message_header.c.id == message_id)
                           ).mappings().first()
    return None if row is None else plain(row)


def session_messages(store: SqlStore, session_id: int, *, offset: int = 0,
                     limit: int | None = None) -> list[dict[str, Any]]:
    """The messages of a session, oldest first, from ``offset``, at most ``limit``."""
    h = message_header.c
    query = select(message_header).where(h.session_id == session_id).order_by(h.id)
    if offset:
        query = query.offset(offset)
    if limit is not None:
        query = query.limit(limit)
    with store.db.read() as conn:
        return [plain(r) for r in conn.execute(query).mappings()]


def count_session(store: SqlStore, session_id: int) -> int:
    """How many messages session ``session_id`` has."""
    with store.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(message_header).where(
            message_header.c.session_id == session_id)).scalar_one())


def attempts_of(store: SqlStore, message_ids: Sequence[int]) -> dict[int, list[AttemptRow]]:
    """The attempts of each of ``message_ids``, in order."""
    a = message_attempt.c
    found: dict[int, list[AttemptRow]] = {mid: [] for mid in message_ids}
    if not message_ids:
        return found
    with store.db.read() as conn:
        for row in conn.execute(select(message_attempt).where(a.message_id.in_(message_ids))
                                .order_by(a.message_id, a.attempt)).mappings():
            found[row["message_id"]].append(AttemptRow.from_mapping(row))
    return found


def events_of(store: SqlStore, message_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The events of any of ``message_ids``, oldest first."""
    e = event_log.c
    if not message_ids:
        return []
    with store.db.read() as conn:
        return [plain(r) for r in conn.execute(
            select(event_log).where(e.message_id.in_(message_ids)).order_by(e.id)).mappings()]


def events_page(store: SqlStore, flt: EventFilter, *, before: int | None = None,
                after: int | None = None, limit: int = PAGE_SIZE) -> Page:
    """The page of events matching ``flt``, newest first (cursors as :func:`messages_page`)."""
    return _events_keyset(store, flt, before=before, after=after, limit=limit)


def _events_keyset(store: SqlStore, flt: EventFilter, *, before: int | None,
                   after: int | None, limit: int, cap: bool = True) -> Page:
    query = flt.where(select(event_log))
    return _keyset(store, query, event_log.c.id, before=before, after=after, limit=limit,
                   cap=cap)


def iter_events(store: SqlStore, flt: EventFilter, *,
                chunk: int = BODY_CHUNK) -> Iterator[dict[str, Any]]:
    """Every event matching ``flt``, newest first, read ``chunk`` rows at a time."""
    before = None
    while True:
        page = _events_keyset(store, flt, before=before, after=None, limit=chunk, cap=False)
        yield from page.rows
        if page.older is None:
            return
        before = page.older


@dataclass
class ItemStatus:
    """One item's queue on the portal's front page."""

    queued: int = 0
    in_flight: int = 0
    retrying: int = 0
    oldest_queued: datetime | None = None
    last_error: dict[str, Any] | None = None
    breaker: dict[str, Any] | None = None


@dataclass
class ProductionStatus:
    items: dict[str, ItemStatus] = field(default_factory=dict)
    daemons: list[dict[str, Any]] = field(default_factory=list)
    leases: dict[str, str] = field(default_factory=dict)  # unexpired: name -> owner


def production_status(store: SqlStore, items: Sequence[str], *,
                      now: datetime) -> ProductionStatus:
    """The queues of ``items``, every registered daemon, and the leases unexpired at ``now``."""
    status = ProductionStatus()
    with store.db.read() as conn:
        status.leases = {r.name: r.owner for r in conn.execute(
            select(lease.c.name, lease.c.owner, lease.c.expires_at))
            if as_utc(r.expires_at) >= now}
        breakers = {r["config_name"]: plain(r)
                    for r in conn.execute(select(item_breaker)).mappings()}
        for name in items:
            one = status.items[name] = _item_status(conn, name)
            one.breaker = breakers.get(name)
        status.daemons = [plain(r) for r in conn.execute(
            select(daemon).order_by(daemon.c.started_at)).mappings()]
    return status


def _item_status(conn: Any, name: str) -> ItemStatus:
    """One item's queue, read from indexes only."""
    h, e = message_header.c, event_log.c
    one = ItemStatus()
    for state, count in conn.execute(
            select(h.status, func.count()).where(h.target == name,
                                                 h.status.in_((Status.QUEUED, Status.DELIVERED)))
            .group_by(h.status)):
        if state == Status.QUEUED:
            one.queued = count
        else:
            one.in_flight = count
    if one.queued:
        one.oldest_queued = as_utc(conn.execute(
            select(h.time_created).where(h.target == name, h.status == Status.QUEUED)
            .order_by(h.id).limit(1)).scalar())
    if one.queued or one.in_flight:
        one.retrying = int(conn.execute(select(func.count()).where(
            h.target == name, h.retry_needed.is_(True), or_(
                (h.status == Status.QUEUED) & h.next_attempt_at.is_not(None),
                h.status == Status.DELIVERED))).scalar_one())
    error = conn.execute(select(e.time_logged, e.text, e.message_id).where(
        e.config_name == name, e.type == "Error").order_by(e.time_logged.desc()).limit(1)
    ).mappings().first()
    one.last_error = None if error is None else plain(error)
    return one


def _rows(result: Any, query: Select[Any], *, raw: bool = False) -> list[Any]:
    """The rows as dicts (``raw``: lists), their times aware UTC."""
    names = list(result.keys())
    times = [i for i, column in enumerate(query.selected_columns)
             if isinstance(column.type, DateTime)]
    out: list[Any] = []
    for row in result:
        values = list(row)
        for i in times:
            if values[i] is not None and values[i].tzinfo is None:
                values[i] = values[i].replace(tzinfo=UTC)
        out.append(values if raw else dict(zip(names, values)))
    return out


EXPORT_COLUMNS = ("id", "session_id", "time_created", "time_completed", "source", "target",
                  "kind", "status", "attempts", "retry_needed", "error_text",
                  "corresponding_id")


def export_rows(store: SqlStore, flt: MessageFilter, *, body: bool = False,
                chunk: int = 2_000) -> Iterator[list[Any]]:
    """Every message matching ``flt`` as :data:`EXPORT_COLUMNS` values (plus the body, with
    ``body``), in the list's order, read ``chunk`` rows at a time."""
    h = message_header.c
    columns = [h[name] for name in EXPORT_COLUMNS]
    if body or flt.body:
        columns.append(h.body)
    query = _message_where(select(*columns), flt)
    key, before = _sort_key(store, flt.sort), None
    while True:
        page = _keyset(store, query, h.id, before=before, after=None, limit=chunk,
                       sort=key, descending=flt.descending, cap=False, raw=True)
        for row in page.rows:
            if flt.body and not _body_matches(row[-1], flt.body):
                continue
            yield row if body or not flt.body else row[:-1]
        if page.older is None:
            return
        before = page.older


def _keyset(store: SqlStore, query: Select[Any], key: Any, *, before: int | None,
            after: int | None, limit: int, sort: Any = None, descending: bool = True,
            cap: bool = True, raw: bool = False) -> Page:
    """One page of ``query`` ordered by (``sort``, ``key``) from an id cursor. ``cap``: at
    most MAX_PAGE_SIZE rows; ``raw``: rows as lists, the id first."""
    limit = max(1, min(limit, MAX_PAGE_SIZE) if cap else limit)
    going_back = after is not None and before is None
    forward = descending != going_back
    keys = [key] if sort is None else [sort, key]
    cursor = after if going_back else before
    with searching(store) as conn:
        if cursor is not None:
            if sort is None:
                position: Any = key
                values: Any = cursor
            else:
                position = tuple_(*keys)
                found = conn.execute(select(sort, key).select_from(query.get_final_froms()[0])
                                     .where(key == cursor)).first()
                values = tuple_(*(literal(v) for v in found)) if found else None
            if values is not None:
                query = query.where(position < values if forward else position > values)
        query = query.order_by(*(k.desc() if forward else k.asc() for k in keys))
        rows: Any = _rows(conn.execute(query.limit(limit + 1)), query, raw=raw)
    more = len(rows) > limit
    rows = rows[:limit]
    ident = 0 if raw else "id"
    if going_back:
        rows.reverse()
        return Page(rows, older=rows[-1][ident] if rows else None,
                    newer=rows[0][ident] if more and rows else None)
    return Page(rows, older=rows[-1][ident] if more and rows else None,
                newer=rows[0][ident] if before is not None and rows else None)


__all__ = ["EventFilter", "ItemStatus", "MessageFilter", "Page", "ProductionStatus",
           "SearchTimedOut", "SearchTooComplex", "searching",
           "attempts_of", "count_messages", "events_of", "events_page", "message",
           "messages_page", "production_status", "resendable_ids",
           "session_messages", "export_rows", "iter_events",
           "PropertyFilter", "duration_ms"]
