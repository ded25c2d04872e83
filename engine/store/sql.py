"""SqlStore: the message queue, attempts and claims, on SQLite or PostgreSQL.

Every method is one short transaction named after what it does. Claims are single
``UPDATE … WHERE id = (SELECT … LIMIT 1 [FOR UPDATE SKIP LOCKED]) RETURNING`` statements, so
several workers and several daemons can share a queue without taking a message twice.

A transaction that puts work in a queue (a new message, one released or parked) *announces*
its target: callbacks registered in this process run after the commit, and on PostgreSQL a
``NOTIFY encore_queue, '<target>'`` in the same transaction reaches every daemon that listens
(:mod:`engine.store.notify`), so idle workers wake at once instead of at their next poll.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, bindparam, func, or_, select, update
from sqlalchemy.exc import SQLAlchemyError

from engine.clock import as_utc, utcnow
from engine.errors import StoreError
from engine.store import migrate
from engine.store.database import READ_ONLY, create_db_engine
from engine.store.eventlog import SqlEventLog
from engine.store.leases import SqlLeases
from engine.store.models import daemon, item_state, message_attempt, message_header
from engine.store.notify import QueueAnnouncer, QueueCallback
from engine.store.rows import AttemptEnd, AttemptRow, MessageRow

__all__ = ["AttemptRow", "MessageRow", "SqlStore"]


class SqlStore:
    """The durable store of one production. ``url`` is an SQLAlchemy URL."""

    def __init__(self, url: str, *, engine: Engine | None = None) -> None:
        self.url = url
        self.engine = engine or create_db_engine(url)
        self.events = SqlEventLog(self.engine)
        self.leases = SqlLeases(self)
        self.is_postgres = self.engine.dialect.name == "postgresql"
        self._announcer = QueueAnnouncer(postgres=self.is_postgres)

    # -- schema --------------------------------------------------------------------------
    def upgrade(self) -> None:
        """Create or upgrade every table (Alembic, to head). Safe when several processes run
        it at once; refuses a database migrated by a newer Encore."""
        migrate.upgrade(self.engine)

    def check_schema(self) -> None:
        """Raise StoreError unless the database is at the revision this code knows: an older
        schema asks for ``encore db upgrade``, a newer one for a newer Encore."""
        migrate.check(self.engine)

    def db_now(self) -> datetime:
        """The database server's current time (aware UTC). SQLite has no server: its clock
        is this host's."""
        if not self.is_postgres:
            return utcnow()
        with self._read() as conn:
            value = as_utc(conn.execute(select(func.clock_timestamp())).scalar_one())
        assert value is not None
        return value

    def dispose(self) -> None:
        self.engine.dispose()

    # -- intake --------------------------------------------------------------------------
    def enqueue(self, *, target: str, body_class: str | None, body: str, source: str | None = None,
                session_id: int | None = None, now: datetime | None = None) -> int:
        """Commit a new request for ``target`` and return its id. Starts a session if
        ``session_id`` is None (the session id is then the message's own id)."""
        now = now or utcnow()
        with self._tx() as conn:
            new_id = conn.execute(message_header.insert().values(
                session_id=session_id, source=source, target=target, kind="request",
                body_class=body_class, body=body, status="Queued", is_error=False,
                time_created=now, retry_needed=False, attempts=0,
            ).returning(message_header.c.id)).scalar_one()
            if session_id is None:
                conn.execute(update(message_header).where(message_header.c.id == new_id)
                             .values(session_id=new_id))
            self._announcer.notify(conn, [target])
        self._announcer.call_back([target])
        return int(new_id)

    def enqueue_many(self, *, target: str, bodies: list[tuple[str | None, str]],
                     source: str | None = None, now: datetime | None = None) -> list[int]:
        """Commit new requests for ``target`` (``(body_class, body)`` pairs), each starting
        its own session, in one transaction; return their ids in order."""
        now = now or utcnow()
        ids: list[int] = []
        with self._tx() as conn:
            for body_class, body in bodies:
                new_id = conn.execute(message_header.insert().values(
                    source=source, target=target, kind="request", body_class=body_class,
                    body=body, status="Queued", is_error=False, time_created=now,
                    retry_needed=False, attempts=0).returning(message_header.c.id)).scalar_one()
                conn.execute(update(message_header).where(message_header.c.id == new_id)
                             .values(session_id=new_id))
                ids.append(int(new_id))
            if ids:
                self._announcer.notify(conn, [target])
        if ids:
            self._announcer.call_back([target])
        return ids

    # -- claims --------------------------------------------------------------------------
    def claim_next(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
                   fifo: bool = False) -> MessageRow | None:
        """Take the oldest due message of ``target``: queued and due, or abandoned by a
        daemon whose lease expired. Marks it ``Delivered`` and leases it to ``owner``.

        ``fifo``: take only the head of the queue — the oldest message that is queued or
        delivered — and only when it is due; None while it waits for its next attempt or is
        held by another claim, so that nothing overtakes it (a FIFO item; its item lease makes
        the caller the only daemon that claims it).
        """
        with self._tx(durable=False) as conn:  # lost in a server crash: queued again
            row = self._claim(conn, target, owner, now, lease_seconds, fifo)
        return MessageRow.from_mapping(row) if row else None

    def claim_and_begin(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
                        fifo: bool = False, durable: bool = True
                        ) -> tuple[MessageRow, int | None] | None:
        """:meth:`claim_next`, and when the message has never been attempted, attempt 1
        begun at ``now`` in the same transaction (see :meth:`begin_attempt` for
        ``durable``). Returns the row as claimed and the new attempt's id (None: the worker
        begins its next attempt itself, after looking for one left open)."""
        with self._tx(durable=durable) as conn:
            row = self._claim(conn, target, owner, now, lease_seconds, fifo)
            if row is None:
                return None
            attempt_id = self._begin_attempt(conn, row["id"], 1, now) \
                if row["attempts"] == 0 else None
        return MessageRow.from_mapping(row), attempt_id

    def _claim(self, conn: Any, target: str, owner: str, now: datetime, lease_seconds: float,
               fifo: bool) -> Any:
        params = {"p_target": target, "p_owner": owner, "p_now": now,
                  "p_expires": now + timedelta(seconds=lease_seconds)}
        return conn.execute(self._claim_statement(fifo), params).mappings().first()

    @functools.cache  # noqa: B019 - two statements per store, built once: the hot path
    def _claim_statement(self, fifo: bool) -> Any:
        h = message_header.c
        now = bindparam("p_now", type_=h.time_created.type)
        due = or_(
            and_(h.status == "Queued", or_(h.next_attempt_at.is_(None), h.next_attempt_at <= now)),
            and_(h.status == "Delivered", h.lease_expires_at < now),
        )
        mine = and_(h.target == bindparam("p_target"), h.kind == "request")
        if fifo:  # no SKIP LOCKED: a head locked for a moment must not be skipped
            pick = select(h.id).where(mine, h.status.in_(("Queued", "Delivered"))) \
                .order_by(h.id).limit(1)
        else:
            pick = select(h.id).where(mine, due).order_by(h.id).limit(1)
            if self.is_postgres:
                pick = pick.with_for_update(skip_locked=True)
        return (update(message_header).where(h.id == pick.scalar_subquery(), due)
                .values(status="Delivered", claimed_by=bindparam("p_owner"),
                        lease_expires_at=bindparam("p_expires", type_=h.time_created.type),
                        time_processed=func.coalesce(h.time_processed, now))
                .returning(*message_header.c))

    def renew_leases(self, owner: str, *, now: datetime, lease_seconds: float) -> int:
        """Extend every lease ``owner`` holds; returns how many."""
        h = message_header.c
        with self._tx() as conn:
            return conn.execute(update(message_header)
                                .where(h.claimed_by == owner, h.status == "Delivered")
                                .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
                                ).rowcount

    def next_due_time(self, target: str) -> datetime | None:
        """When the earliest parked message of ``target`` becomes due (None: none parked)."""
        h = message_header.c
        with self._read() as conn:
            value = conn.execute(select(func.min(h.next_attempt_at)).where(
                h.target == target, h.status == "Queued", h.next_attempt_at.is_not(None))
            ).scalar()
        return as_utc(value)

    # -- attempts ------------------------------------------------------------------------
    def begin_attempt(self, message_id: int, attempt: int, *, started_at: datetime,
                      durable: bool = True) -> int:
        """Record that attempt ``attempt`` starts now (before anything is sent).

        ``durable``: the commit reaches disk before the request can leave, so that even a
        database server crash cannot hide an attempt that may have reached the service —
        needed for non-idempotent items. For idempotent ones a lost record only means the
        request may be sent once more, which they allow.
        """
        with self._tx(durable=durable) as conn:
            return self._begin_attempt(conn, message_id, attempt, started_at)

    @staticmethod
    def _begin_attempt(conn: Any, message_id: int, attempt: int, started_at: datetime) -> int:
        h = message_header.c
        conn.execute(update(message_header).where(h.id == message_id).values(
            attempts=attempt, next_attempt_at=None,
            first_attempt_at=func.coalesce(h.first_attempt_at, started_at)))
        return int(conn.execute(message_attempt.insert().values(
            message_id=message_id, attempt=attempt, started_at=started_at,
        ).returning(message_attempt.c.id)).scalar_one())

    def end_attempt(self, attempt_id: int, *, ended_at: datetime, outcome: str,
                    server: str | None = None, status_code: int | None = None,
                    error_text: str | None = None) -> None:
        """Record the end of an attempt. Not durable on its own: lost in a server crash, the
        attempt looks unfinished and is treated as outcome unknown."""
        with self._tx(durable=False) as conn:
            conn.execute(update(message_attempt).where(message_attempt.c.id == attempt_id).values(
                ended_at=ended_at, outcome=outcome, server=server, status_code=status_code,
                error_text=error_text))

    def open_attempt(self, message_id: int) -> AttemptRow | None:
        """The attempt of ``message_id`` that never ended (in flight at a crash), if any."""
        a = message_attempt.c
        with self._read() as conn:
            row = conn.execute(select(message_attempt).where(
                a.message_id == message_id, a.ended_at.is_(None)).order_by(a.attempt.desc())
            ).mappings().first()
        return AttemptRow.from_mapping(row) if row else None

    def attempts(self, message_id: int) -> list[AttemptRow]:
        a = message_attempt.c
        with self._read() as conn:
            rows = conn.execute(select(message_attempt).where(a.message_id == message_id)
                                .order_by(a.attempt)).mappings().all()
        return [AttemptRow.from_mapping(r) for r in rows]

    # -- outcomes ------------------------------------------------------------------------
    def schedule_retry(self, message_id: int, *, next_attempt_at: datetime, release: bool) -> None:
        """Persist the retry-needed flag and the next attempt time. ``release`` parks the
        message back in the queue (requeue mode, or a stop during a blocking wait)."""
        values: dict[str, Any] = {"retry_needed": True, "next_attempt_at": next_attempt_at}
        if release:
            values.update(status="Queued", claimed_by=None, lease_expires_at=None)
        self._update(message_id, announce=release, **values)

    def release(self, message_id: int) -> None:
        """Put a claimed message back in its queue as it is (graceful stop)."""
        self._update(message_id, announce=True, status="Queued", claimed_by=None,
                     lease_expires_at=None)

    def release_claim(self, message_id: int, owner: str) -> bool:
        """Put ``message_id`` back in its queue if ``owner`` still holds its claim (a worker
        lost track of it through a database error); True if it did."""
        h = message_header.c
        with self._tx() as conn:
            target = conn.execute(update(message_header)
                                  .where(h.id == message_id, h.status == "Delivered",
                                         h.claimed_by == owner)
                                  .values(status="Queued", claimed_by=None, lease_expires_at=None)
                                  .returning(h.target)).scalar()
            if target is not None:
                self._announcer.notify(conn, [target])
        if target is not None:
            self._announcer.call_back([target])
        return target is not None

    def complete(self, request: MessageRow, *, response_class: str | None,
                 response_body: str | None, now: datetime,
                 attempt: AttemptEnd | None = None) -> int | None:
        """Mark ``request`` ``Completed``, end its last ``attempt`` (outcome ok) and store its
        response, if any, linked both ways — in one transaction. Not durable on its own: lost
        in a server crash, the attempt looks unfinished (outcome unknown)."""
        h = message_header.c
        with self._tx(durable=False) as conn:
            if attempt is not None:
                conn.execute(update(message_attempt)
                             .where(message_attempt.c.id == attempt.attempt_id)
                             .values(ended_at=attempt.ended_at, outcome="ok",
                                     server=attempt.server))
            response_id = None
            if response_body is not None:
                response_id = conn.execute(message_header.insert().values(
                    session_id=request.session_id, source=request.target,
                    target=request.source or "", kind="response", body_class=response_class,
                    body=response_body, status="Completed", is_error=False, time_created=now,
                    time_processed=now, time_completed=now, corresponding_id=request.id,
                    retry_needed=False, attempts=0).returning(h.id)).scalar_one()
            conn.execute(update(message_header).where(h.id == request.id).values(
                status="Completed", is_error=False, retry_needed=False, next_attempt_at=None,
                time_completed=now, corresponding_id=response_id, claimed_by=None,
                lease_expires_at=None))
        return response_id

    def finish(self, message_id: int, *, status: str, error_text: str, now: datetime) -> None:
        """End a message in ``Error``, ``Suspended``, ``Discarded`` or ``Aborted``."""
        self._update(message_id, status=status, is_error=status == "Error", error_text=error_text,
                     retry_needed=False, next_attempt_at=None, time_completed=now,
                     claimed_by=None, lease_expires_at=None)

    def get_message(self, message_id: int) -> MessageRow | None:
        with self._read() as conn:
            row = conn.execute(select(message_header).where(message_header.c.id == message_id)
                               ).mappings().first()
        return MessageRow.from_mapping(row) if row else None

    # -- items and daemons ---------------------------------------------------------------
    def set_item_enabled(self, name: str, enabled: bool, *, reason: str | None,
                         now: datetime) -> None:
        """Override the production file's ``enabled`` for item ``name``."""
        with self._tx() as conn:
            conn.execute(item_state.delete().where(item_state.c.config_name == name))
            conn.execute(item_state.insert().values(config_name=name, enabled=enabled,
                                                    reason=reason, updated_at=now))

    def item_overrides(self) -> dict[str, bool]:
        """Items whose enabled state an operator (or action D) has set."""
        with self._read() as conn:
            rows = conn.execute(select(item_state.c.config_name, item_state.c.enabled)).all()
        return {name: bool(enabled) for name, enabled in rows}

    def register_daemon(self, daemon_id: str, *, host: str, pid: int, production: str,
                        items: str, now: datetime) -> None:
        with self._tx() as conn:
            conn.execute(daemon.insert().values(id=daemon_id, host=host, pid=pid,
                                                production=production, started_at=now,
                                                heartbeat_at=now, items=items))

    def stale_daemons(self, before: datetime) -> list[str]:
        """Ids of the daemons whose last heartbeat is older than ``before``."""
        with self._read() as conn:
            return list(conn.execute(select(daemon.c.id).where(daemon.c.heartbeat_at < before))
                        .scalars())

    def heartbeat(self, daemon_id: str, *, now: datetime, lease_seconds: float) -> None:
        """Mark ``daemon_id`` alive and extend the leases on the messages it holds."""
        with self._tx() as conn:
            conn.execute(update(daemon).where(daemon.c.id == daemon_id)
                         .values(heartbeat_at=now))
        self.renew_leases(daemon_id, now=now, lease_seconds=lease_seconds)

    def release_claims(self, owner: str) -> int:
        """Put every message ``owner`` holds back in its queue (its daemon stopped or died).
        Attempts left open stay open: the next delivery treats them as outcome unknown."""
        h = message_header.c
        with self._tx() as conn:
            targets = list(conn.execute(update(message_header)
                                        .where(h.claimed_by == owner, h.status == "Delivered")
                                        .values(status="Queued", claimed_by=None,
                                                lease_expires_at=None)
                                        .returning(h.target)).scalars())
            self._announcer.notify(conn, targets)
        self._announcer.call_back(targets)
        return len(targets)

    def local_daemons(self, host: str) -> list[tuple[str, int]]:
        """(id, pid) of the daemons registered from ``host``."""
        with self._read() as conn:
            return [(r.id, r.pid) for r in conn.execute(
                select(daemon.c.id, daemon.c.pid).where(daemon.c.host == host))]

    def unregister_daemon(self, daemon_id: str) -> None:
        with self._tx() as conn:
            conn.execute(daemon.delete().where(daemon.c.id == daemon_id))

    # -- announcing work ------------------------------------------------------------------
    def add_queue_callback(self, callback: QueueCallback) -> None:
        """Call ``callback(target)`` after this process commits work for ``target``."""
        self._announcer.add_callback(callback)

    def remove_queue_callback(self, callback: QueueCallback) -> None:
        self._announcer.remove_callback(callback)

    def announce(self, targets: Iterable[str]) -> None:
        """Tell idle workers — of this process, and on PostgreSQL of every daemon — that
        ``targets`` may have work (e.g. a FIFO item whose lease was just given up)."""
        names = sorted(set(targets))
        if names and self.is_postgres:
            with self._tx() as conn:
                self._announcer.notify(conn, names)
        self._announcer.call_back(names)

    # -- helpers -------------------------------------------------------------------------
    def _update(self, message_id: int, *, announce: bool = False, **values: Any) -> None:
        h = message_header.c
        with self._tx() as conn:
            target = conn.execute(update(message_header).where(h.id == message_id)
                                  .values(**values).returning(h.target)).scalar()
            if announce and target is not None:
                self._announcer.notify(conn, [target])
        if announce and target is not None:
            self._announcer.call_back([target])

    def _tx(self, *, durable: bool = True) -> Any:
        """A write transaction. ``durable=False``: on PostgreSQL the commit does not wait for
        the WAL flush (``synchronous_commit = off``) — for writes whose loss in a database
        server crash the engine recovers from (see :meth:`begin_attempt`)."""
        return _Transaction(self.engine, durable=durable or not self.is_postgres)

    def _read(self) -> Any:
        """A connection for reads only (on SQLite: no write lock)."""
        return self.engine.connect().execution_options(**{READ_ONLY: True})


class _Transaction:
    """``engine.begin()`` that turns SQLAlchemy errors into StoreError with the cause."""

    def __init__(self, engine: Engine, *, durable: bool = True) -> None:
        self._cm = engine.begin()
        self._durable = durable

    def __enter__(self) -> Any:
        try:
            conn = self._cm.__enter__()
            if not self._durable:
                conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            return conn
        except SQLAlchemyError as exc:
            raise StoreError(f"database unavailable: {exc}") from exc

    def __exit__(self, *exc_info: Any) -> bool:
        try:
            self._cm.__exit__(*exc_info)
        except SQLAlchemyError as exc:
            raise StoreError(f"database error: {exc}") from exc
        if exc_info[0] is not None and issubclass(exc_info[0], SQLAlchemyError):
            raise StoreError(f"database error: {exc_info[1]}") from exc_info[1]
        return False
