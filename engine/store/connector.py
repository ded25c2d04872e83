"""The database of one store (``store.db``): read connections and write transactions with
SQLAlchemy's errors turned into StoreError, the hot path (``hot``), the event log (``events``)
and the announcements made with a commit (``announcer``). Every store module writes through it.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from sqlalchemy import Connection, Engine, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql import Update

from engine.errors import StoreError
from engine.store.database import READ_ONLY, reason_of, sqlite_file
from engine.store.doorbell import Doorbell
from engine.store.eventlog import SqlEventLog
from engine.store.hotpath import HotPath, PostgresHotPath, SqliteHotPath
from engine.store.hotpath.base import check_claim
from engine.store.models import message_header
from engine.store.notify import Announcement, QueueAnnouncer, done_announcements
from engine.store.statuses import Status

__all__ = ["Database", "Transaction", "check_claim", "fenced_update", "work_announcements"]


class Database:
    """One SQLAlchemy ``engine`` and what every module of the store does with it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        self.events = SqlEventLog(engine)
        file = None if self.is_postgres else sqlite_file(
            engine.url.render_as_string(hide_password=False))
        self.doorbell = Doorbell(file) if file else None
        self.announcer = QueueAnnouncer(postgres=self.is_postgres, doorbell=self.doorbell)
        driver_error = engine.dialect.loaded_dbapi.Error
        hot = PostgresHotPath if self.is_postgres else SqliteHotPath
        self.hot: HotPath = hot(engine, lambda exc: isinstance(exc, driver_error),
                                shared=isinstance(engine.pool, StaticPool))
        self.hot.on_waited_done = self.announce_done

    def tx(self, *, durable: bool = True) -> Transaction:
        """A write transaction. ``durable=False``: on PostgreSQL the commit does not wait for
        the WAL flush."""
        return Transaction(self.engine, durable=durable or not self.is_postgres)

    def single(self) -> Transaction:
        """An autocommit connection on PostgreSQL (a write transaction on SQLite), for a
        statement that locks a row another daemon may renew: a frozen daemon must not hold
        that lock until its COMMIT."""
        return Transaction(self.engine, autocommit=self.is_postgres)

    def read(self) -> Transaction:
        """A read-only connection; on SQLite without the write lock, so it never waits."""
        return Transaction(self.engine, read_only=True)

    def announce(self, news: Sequence[Announcement]) -> None:
        """Announce ``news`` to every process, outside any transaction."""
        if news and self.is_postgres:
            with self.tx() as conn:
                self.announcer.notify(conn, news)
        self.announcer.call_back(news)

    def announce_done(self, ids: list[int]) -> None:
        """Announce the end of waited-for ``ids`` here and on SQLite (on PostgreSQL the
        NOTIFY went with the commit)."""
        self.announcer.call_back(done_announcements(ids))

    def dispose(self) -> None:
        """Close the doorbell, the hot path and the engine's pool."""
        if self.doorbell is not None:
            self.doorbell.close()
        self.hot.dispose()
        self.engine.dispose()


def fenced_update(message_id: int, token: int | None) -> Update:
    """UPDATE of ``message_id``, fenced, when ``token`` is given, by the claim still holding
    it: ``Delivered`` with that token (an expired claim leaves the token on a Queued row)."""
    h = message_header.c
    stmt = update(message_header).where(h.id == message_id)
    if token is None:
        return stmt
    return stmt.where(h.claim_token == token, h.status == Status.DELIVERED)


class Transaction:
    """A transaction (or read-only or autocommit connection) raising StoreError with the
    driver's reason."""

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
    """One work announcement per target, in name order."""
    return [Announcement.work(t) for t in sorted(set(targets))]
