"""The database of one store: what :class:`~engine.store.sql.SqlStore` and its sibling modules
(leases, breakers, rate buckets, accounts, the operator's actions, the viewer, ...) share.

One :class:`Database` per store, reached as ``store.db`` (the sibling tables of a store are
built over it): its read connections and write transactions, with SQLAlchemy's errors turned
into StoreError (:class:`Transaction`); the hot path's prebuilt statements (``hot``); the
event log whose held events go with the next write (``events``); and the announcements made
with a commit (``announcer``, :meth:`Database.announce`). A module that writes asks it for a
transaction rather than reaching into the store, so the store's own methods and every
sibling's go through the same code.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from sqlalchemy import Connection, Engine, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql import Update

from engine.errors import ClaimLost, StoreError
from engine.store.database import READ_ONLY, reason_of, sqlite_file
from engine.store.doorbell import Doorbell
from engine.store.eventlog import SqlEventLog
from engine.store.hotpath import HotPath, PostgresHotPath, SqliteHotPath
from engine.store.models import message_header
from engine.store.notify import Announcement, QueueAnnouncer, done_announcements
from engine.store.statuses import Status

__all__ = ["Database", "Transaction", "check_claim", "fenced_update", "work_announcements"]

Write = Callable[[Connection], None]  # a write deferred to a thread's next change


class Database:
    """One SQLAlchemy ``engine`` and what every module of the store does with it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        self.events = SqlEventLog(engine)
        file = None if self.is_postgres else sqlite_file(
            engine.url.render_as_string(hide_password=False))
        # this process's doorbell (an SQLite file): what other processes ring
        self.doorbell = Doorbell(file) if file else None
        # callbacks of this process, NOTIFY (PostgreSQL) or the other processes' doorbells
        self.announcer = QueueAnnouncer(postgres=self.is_postgres, doorbell=self.doorbell)
        driver_error = engine.dialect.loaded_dbapi.Error
        hot = PostgresHotPath if self.is_postgres else SqliteHotPath
        self.hot: HotPath = hot(engine, lambda exc: isinstance(exc, driver_error),
                                shared=isinstance(engine.pool, StaticPool))
        self.hot.on_waited_done = self.announce_done
        self._local = threading.local()  # .writes: writes deferred to the next change

    @contextmanager
    def tx(self, *, durable: bool = True, changes: bool = False) -> Iterator[Connection]:
        """A write transaction. ``durable=False``: on PostgreSQL the commit does not wait for
        the WAL flush (``synchronous_commit = off``) — for writes whose loss in a database
        server crash the engine recovers from (see ``SqlStore.begin_attempt``). The events
        this thread holds for its next change (:meth:`SqlEventLog.until_next_change`) are
        inserted in it, before it commits; ``changes`` (a change of a message's state): so
        are the writes deferred to it (:meth:`deferred`)."""
        with Transaction(self.engine, durable=durable or not self.is_postgres) as conn:
            if changes:
                deferred = self.deferred()
                while deferred:
                    deferred.pop(0)(conn)
            yield conn
            self.events.insert_held(conn)

    def single(self) -> Transaction:
        """A connection whose every statement commits on its own, in the server (autocommit)
        on PostgreSQL — for a statement that locks a row another daemon may be renewing (a
        lease it may take): between such a statement and its COMMIT, a daemon frozen or cut
        off would hold the lock, and hold up the row's owner, as long as it stays so. On
        SQLite a write transaction, as :meth:`tx`."""
        return Transaction(self.engine, autocommit=self.is_postgres)

    def read(self) -> Transaction:
        """A connection for reads only: on SQLite a plain BEGIN, without the write lock
        (``log --follow``, ``status``, metrics scrapes and the portal never wait for
        writers), with errors turned into StoreError as for every write."""
        return Transaction(self.engine, read_only=True)

    def deferred(self) -> list[Write]:
        """This thread's writes deferred to its next change of a message (a failed
        attempt's end, ``SqlStore.end_attempt``), in order: :meth:`tx` with ``changes``
        runs them in its transaction; the caller may append or clear."""
        writes: list[Write] | None = getattr(self._local, "writes", None)
        if writes is None:
            writes = self._local.writes = []
        return writes

    def announce(self, news: Sequence[Announcement]) -> None:
        """Tell every process on the database, outside any transaction: NOTIFY in a
        transaction of its own on PostgreSQL, the doorbells of the other processes on
        SQLite, and this process's callbacks."""
        if news and self.is_postgres:
            with self.tx() as conn:
                self.announcer.notify(conn, news)
        self.announcer.call_back(news)

    def announce_done(self, ids: list[int]) -> None:
        """Messages someone waits for ended (committed): tell this process's waiters and
        (SQLite) ring the others — on PostgreSQL the NOTIFY went with the commit, and there
        is no doorbell to ring."""
        self.announcer.call_back(done_announcements(ids))

    def dispose(self) -> None:
        """Close the doorbell, the hot path's connections and the engine's pool."""
        if self.doorbell is not None:
            self.doorbell.close()
        self.hot.dispose()
        self.engine.dispose()


def fenced_update(message_id: int, token: int | None) -> Update:
    """UPDATE of ``message_id``, conditional, when a token is given, on the claim of that
    token still holding it: the message still ``Delivered`` with that token. (A claim taken
    back on expiry leaves the message ``Queued`` with its token until the next claim: the
    token alone would let the old claimer write about a message it no longer holds.)"""
    h = message_header.c
    stmt = update(message_header).where(h.id == message_id)
    if token is None:
        return stmt
    return stmt.where(h.claim_token == token, h.status == Status.DELIVERED)


def check_claim(changed: int, ident: int, token: int | None, what: str = "message") -> None:
    """Raise ClaimLost when a write conditional on ``token`` changed nothing."""
    if token is not None and not changed:
        raise ClaimLost(f"{what} {ident}: its claim (token {token}) is no longer this "
                        "worker's; another daemon has taken it over")


class Transaction:
    """``engine.begin()`` (or a read-only connection) that turns SQLAlchemy errors into
    StoreError with the driver's reason — never the statement or its parameters."""

    def __init__(self, engine: Engine, *, durable: bool = True, read_only: bool = False,
                 autocommit: bool = False) -> None:
        self._engine = engine
        self._read_only = read_only
        self._autocommit = autocommit
        self._durable = durable
        self._cm: Any = None

    def __enter__(self) -> Connection:
        try:
            if self._read_only:
                self._cm = self._engine.connect().execution_options(**{READ_ONLY: True})
            elif self._autocommit:
                self._cm = self._engine.connect().execution_options(
                    isolation_level="AUTOCOMMIT")
            else:
                self._cm = self._engine.begin()
            conn: Connection = self._cm.__enter__()
            if not self._durable:
                conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            return conn
        except SQLAlchemyError as exc:
            raise StoreError(f"database unavailable: {reason_of(exc)}") from exc

    def __exit__(self, *exc_info: Any) -> Literal[False]:
        try:
            self._cm.__exit__(*exc_info)
        except SQLAlchemyError as exc:
            raise StoreError(f"database error: {reason_of(exc)}") from exc
        if exc_info[0] is not None and issubclass(exc_info[0], SQLAlchemyError):
            raise StoreError(f"database error: {reason_of(exc_info[1])}") from exc_info[1]
        return False


def work_announcements(targets: Iterable[str]) -> list[Announcement]:
    """One work announcement per target of ``targets``, in name order."""
    return [Announcement.work(t) for t in sorted(set(targets))]
