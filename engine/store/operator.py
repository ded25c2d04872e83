"""Operator actions on messages and items, and the purge of old messages (docs/operating.md).

Each action checks the message's status in the statement that changes it, so a daemon's claim
always wins; a refused action raises :class:`~engine.errors.OperatorError` saying why. Every
action writes its event in the same transaction.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    any_,
    bindparam,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY

from engine.clock import as_utc
from engine.errors import ItemNotFound, MessageNotFound, OperatorError
from engine.store.models import (
    event_log,
    message_attempt,
    message_header,
    message_property,
)
from engine.store.notify import done_announcements
from engine.store.sql import MessageRow, SqlStore
from engine.store.statuses import ENDED_STATUSES, FINAL_STATUSES, Status
from engine.store.transitions import ending

log = logging.getLogger(__name__)

RESENDABLE_STATUSES = ENDED_STATUSES
SUSPENDABLE_STATUSES = (Status.QUEUED,)
DISCARDABLE_STATUSES = (Status.QUEUED, Status.SUSPENDED)
ENDING_STATUSES = ENDED_STATUSES
RESEND_SOURCE_PREFIX = "resend:"
PURGE_BATCH = 500  # requests per transaction, so a daemon is never blocked for long
_ID_ARRAY = ARRAY(BigInteger)
_SOURCE_CLASS = "Operator"
OPERATOR = "an operator"  # who acted, when the caller names nobody (the CLI)


def resent_from(source: str | None) -> int | None:
    """The original's id if ``source`` marks a resent message, else None."""
    if source and source.startswith(RESEND_SOURCE_PREFIX):
        tail = source[len(RESEND_SOURCE_PREFIX):]
        return int(tail) if tail.isdigit() else None
    return None


# -- messages ----------------------------------------------------------------------------
def resend(store: SqlStore, message_id: int, *, now: datetime, target: str | None = None,
           known_items: Collection[str] | None = None, by: str = OPERATOR) -> int:
    """Queue a copy of request ``message_id`` for its target or ``target``; return its id.
    ``known_items`` (None: unchecked) bounds the target; ``by`` is named in the event."""
    h = message_header.c
    with store.db.tx() as conn:
        row = _require(_message(conn, message_id, lock=True), message_id,
                       RESENDABLE_STATUSES, "resent")
        new_target = target or row.target
        if known_items is not None and new_target not in known_items:
            raise OperatorError(f"message {message_id} cannot be resent to {new_target!r}: "
                                f"no such item in the production (items: "
                                f"{', '.join(sorted(known_items)) or 'none'})")
        new_id = int(conn.execute(message_header.insert().values(
            session_id=row.session_id or row.id, source=f"{RESEND_SOURCE_PREFIX}{message_id}",
            target=new_target, kind="request", body_class=row.body_class, body=row.body,
            status=Status.QUEUED, is_error=False, time_created=now, retry_needed=False,
            attempts=0,
        ).returning(h.id)).scalar_one())
        copy_properties(conn, message_id, new_id)
        where = "" if new_target == row.target else f" to {new_target}"
        _event(conn, "Info", f"resent by {by} as message {new_id}{where}", row,
               method="resend", now=now)
    return new_id


def suspend(store: SqlStore, message_id: int, *, now: datetime, by: str = OPERATOR) -> None:
    """Suspend a ``Queued`` request until an operator resends or discards it."""
    _transition(store, message_id, SUSPENDABLE_STATUSES, "suspended", now=now,
                status=Status.SUSPENDED,
                event=("Info", f"suspended by {by}", "suspend"))
    log.info("message %d suspended", message_id)


def discard(store: SqlStore, message_id: int, *, now: datetime, by: str = OPERATOR) -> None:
    """End a ``Queued`` or ``Suspended`` request in ``Discarded``; it is never delivered."""
    _transition(store, message_id, DISCARDABLE_STATUSES, "discarded", now=now,
                status=Status.DISCARDED,
                event=("Info", f"discarded by {by}", "discard"))
    log.info("message %d discarded", message_id)


def suspended_messages(store: SqlStore, *, item: str | None = None) -> list[dict[str, Any]]:
    """Suspended requests, oldest first, of ``item`` only unless it is None."""
    h = message_header.c
    query = select(h.id, h.session_id, h.target, h.attempts, h.error_text, h.time_created,
                   h.time_completed.label("suspended_at")) \
        .where(h.kind == "request", h.status == Status.SUSPENDED).order_by(h.id)
    if item is not None:
        query = query.where(h.target == item)
    with store.engine.connect() as conn:
        return [{k: as_utc(v) if isinstance(v, datetime) else v for k, v in r.items()}
                for r in conn.execute(query).mappings()]


# -- items -------------------------------------------------------------------------------
def enable_item(store: SqlStore, item: str, *, known_items: Collection[str],
                now: datetime, by: str = OPERATOR) -> None:
    """Let ``item`` take messages again (overrides the production file)."""
    _set_enabled(store, item, True, reason=None, known_items=known_items, now=now, by=by)


def disable_item(store: SqlStore, item: str, *, known_items: Collection[str],
                 reason: str | None, now: datetime, by: str = OPERATOR) -> None:
    """Stop ``item`` taking messages; its queue keeps filling."""
    _set_enabled(store, item, False, reason=reason, known_items=known_items, now=now, by=by)


def _set_enabled(store: SqlStore, item: str, enabled: bool, *, reason: str | None,
                 known_items: Collection[str], now: datetime, by: str) -> None:
    if item not in known_items:
        raise ItemNotFound(f"no item named {item!r} in the production (items: "
                            f"{', '.join(sorted(known_items)) or 'none'})")
    store.set_item_enabled(item, enabled, reason=reason, now=now)
    text = f"item {'enabled' if enabled else 'disabled'} by {by}"
    store.events.write("Info", f"{text}: {reason}" if reason else text, config_name=item,
                       source_class=_SOURCE_CLASS,
                       source_method="enable" if enabled else "disable", now=now)


# -- purge -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PurgeCounts:
    """Rows removed (or, for a dry run, that would be)."""

    requests: int = 0
    responses: int = 0
    attempts: int = 0
    events: int = 0

    @property
    def messages(self) -> int:
        return self.requests + self.responses

    def __str__(self) -> str:
        """E.g. ``2 request(s), 2 response(s), 3 attempt(s), 0 event(s)``."""
        return (f"{self.requests} request(s), {self.responses} response(s), "
                f"{self.attempts} attempt(s), {self.events} event(s)")

    def __add__(self, other: PurgeCounts) -> PurgeCounts:
        return PurgeCounts(self.requests + other.requests, self.responses + other.responses,
                           self.attempts + other.attempts, self.events + other.events)


def purge(store: SqlStore, older_than: timedelta, now: datetime, *,
          dry_run: bool = False, batch: int | None = None) -> PurgeCounts:
    """Delete finished requests that ended before ``now - older_than``, with their
    responses, attempts and events, and older events of no message. ``dry_run`` only counts.
    Works by index in batches of ``batch`` requests (None: :data:`PURGE_BATCH`)."""
    cutoff, batch = as_utc(now) - older_than, batch or PURGE_BATCH
    total, after = PurgeCounts(), None
    while True:
        with store.db.read() as conn:
            found = _old_requests(conn, cutoff, after, batch)
        if found:  # not durable: a batch a crash undoes, the next purge redoes
            with store.db.tx(durable=False) as conn:
                total += _purge_messages(conn, found, dry_run)
        if len(found) < batch:
            break
        after = found[-1][:2]
    total += _purge_orphan_events(store, cutoff, dry_run, batch * 4)
    log.log(logging.DEBUG if dry_run else logging.INFO, "purge of what ended before %s: %s %s",
            cutoff.isoformat(), "would delete" if dry_run else "deleted", total)
    return total


def _old_requests(conn: Connection, cutoff: datetime, after: tuple[datetime, int] | None,
                  batch: int) -> list[tuple[datetime, int, int | None]]:
    """The next ``batch`` finished requests that ended before ``cutoff``, after ``after``.
    The kind is a literal: a planner matches a partial index's condition by its text."""
    h = message_header.c
    query = select(h.time_completed, h.id, h.corresponding_id).where(
        h.kind == literal_column("'request'"), h.time_completed < cutoff,
        h.status.in_(FINAL_STATUSES))
    if after is not None:
        query = query.where(tuple_(h.time_completed, h.id) > tuple_(
            literal(after[0], h.time_completed.type), literal(after[1])))
    return [(t, i, c) for t, i, c in conn.execute(
        query.order_by(h.time_completed, h.id).limit(batch))]


def _purge_messages(conn: Connection, requests: Sequence[tuple[Any, int, int | None]],
                    dry_run: bool) -> PurgeCounts:
    """Delete (or count) ``requests`` and their responses."""
    h, among = message_header.c, _among(conn)
    request_ids = [i for _, i, _ in requests]
    named = [c for _, _, c in requests if c is not None]
    answers = among(h.corresponding_id, request_ids)
    response_ids = sorted(set(conn.execute(select(h.id).where(
        h.kind == "response", or_(answers, among(h.id, named)) if named else answers)
    ).scalars()))
    ids = [*request_ids, *response_ids]
    attempts = _delete_or_count(conn, message_attempt, among(message_attempt.c.message_id, ids),
                                dry_run)
    _delete_or_count(conn, message_property, among(message_property.c.message_id, ids), dry_run)
    events = _delete_or_count(conn, event_log, among(event_log.c.message_id, ids), dry_run)
    _delete_or_count(conn, message_header, among(h.id, ids), dry_run)
    return PurgeCounts(len(request_ids), len(response_ids), attempts, events)


def _among(conn: Connection) -> Callable[[Any, Sequence[int]], Any]:
    """``column IN ids``; on PostgreSQL one array parameter (``= ANY``)."""
    if conn.dialect.name != "postgresql":
        return lambda column, ids: column.in_(ids)
    return lambda column, ids: column == any_(bindparam(None, list(ids), type_=_ID_ARRAY))


def _purge_orphan_events(store: SqlStore, cutoff: datetime, dry_run: bool,
                         batch: int) -> PurgeCounts:
    """Events before ``cutoff`` of no message, ``batch`` at a time."""
    e, h = event_log.c, message_header.c
    orphan = (e.time_logged < cutoff) & or_(
        e.message_id.is_(None), ~exists().where(h.id == e.message_id))
    removed, after = 0, 0
    while True:
        with store.db.read() as conn:
            ids = list(conn.execute(select(e.id).where(orphan, e.id > after)
                                    .order_by(e.id).limit(batch)).scalars())
        if ids and not dry_run:
            with store.db.tx(durable=False) as conn:
                conn.execute(event_log.delete().where(e.id.in_(ids)))
        removed += len(ids)
        if len(ids) < batch:
            return PurgeCounts(events=removed)
        after = ids[-1]


def _delete_or_count(conn: Connection, table: Any, where: Any, dry_run: bool) -> int:
    if dry_run:
        return int(conn.execute(select(func.count()).select_from(table).where(where))
                   .scalar_one())
    return int(conn.execute(table.delete().where(where)).rowcount)


def copy_properties(conn: Connection, from_id: int, to_id: int) -> None:
    """Give a resent copy the search properties of its original."""
    p = message_property.c
    conn.execute(message_property.insert().from_select(
        ["message_id", "name", "value_text", "value_num"],
        select(literal(to_id), p.name, p.value_text, p.value_num).where(p.message_id == from_id)))


def _transition(store: SqlStore, message_id: int, allowed: Sequence[str], verb: str, *,
                now: datetime, status: str, event: tuple[str, str, str]) -> None:
    """Move a request out of the ``allowed`` statuses by one conditional UPDATE and record
    ``event`` (type, text, method); OperatorError if nothing matched."""
    h = message_header.c
    with store.db.tx() as conn:
        row = conn.execute(update(message_header).where(
            h.id == message_id, h.kind == "request", h.status.in_(allowed)).values(
            **ending(status, now)).returning(*message_header.c)).mappings().first()
        if row is None:
            _require(_message(conn, message_id, lock=False), message_id, allowed, verb)
            raise OperatorError(f"message {message_id} changed status while it was being "
                                f"{verb}; try again")
        type_, text, method = event
        _event(conn, type_, text, MessageRow.from_mapping(row), method=method, now=now)
        ended = row["waited"] and status in ENDING_STATUSES
        if ended:
            store.db.announcer.notify(conn, done_announcements([message_id]))
    if ended:
        store.db.announce_done([message_id])


def _message(conn: Connection, message_id: int, *, lock: bool) -> MessageRow | None:
    query = select(message_header).where(message_header.c.id == message_id)
    if lock:  # SQLite transactions already hold the write lock
        query = query.with_for_update()
    row = conn.execute(query).mappings().first()
    return MessageRow.from_mapping(row) if row else None


def _require(row: MessageRow | None, message_id: int, allowed: Sequence[str],
             verb: str) -> MessageRow:
    """``row``; refused unless it is a request in one of ``allowed`` statuses."""
    if row is None:
        raise MessageNotFound(f"message {message_id} does not exist")
    if row.kind != "request":
        of = f" to request {row.corresponding_id}" if row.corresponding_id else ""
        raise OperatorError(f"message {message_id} is a response{of}; only requests can be "
                            f"{verb}")
    if row.status in allowed:
        return row
    what = _either(allowed)
    if row.status == Status.DELIVERED:
        raise OperatorError(f"message {message_id} is Delivered: it is being delivered by "
                            f"daemon {row.claimed_by or '?'}; try again when its attempt ends "
                            f"(only {what} messages can be {verb})")
    raise OperatorError(f"message {message_id} is {row.status}; only {what} messages can be "
                        f"{verb}")


def _either(statuses: Sequence[str]) -> str:
    return statuses[0] if len(statuses) == 1 else \
        f"{', '.join(statuses[:-1])} or {statuses[-1]}"


def _event(conn: Connection, type_: str, text: str, row: MessageRow, *, method: str,
           now: datetime) -> None:
    conn.execute(event_log.insert().values(
        time_logged=now, type=type_, config_name=row.target, message_id=row.id,
        session_id=row.session_id, source_class=_SOURCE_CLASS, source_method=method,
        text=text))
