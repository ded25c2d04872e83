"""Intake on a bare driver connection: ``encore send`` without importing SQLAlchemy.

:class:`LiteIntake` runs the hot path's own statements on a ``sqlite3`` or psycopg connection
and announces as the full store does. Anything uncommon raises :class:`NotLite`, and the
caller falls back to :class:`~engine.store.sql.SqlStore`.
"""
from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import migrations
from engine.clock import utcnow
from engine.store.database import (
    SQLITE_BUSY_TIMEOUT,
    SQLITE_PRAGMAS,
    create_private_file,
    libpq_conninfo,
)
from engine.store.doorbell import Doorbell
from engine.store.hotpath import Accepted, HotPath, PostgresHotPath, SqliteHotPath
from engine.store.notify import Announcement

SQLITE_SCHEMES = ("sqlite", "sqlite+pysqlite")
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
VERSION_QUERY = "SELECT version_num FROM alembic_version"


class NotLite(Exception):
    """This database is not for the lite path: use the full store."""


class _Raw:
    """What the hot path takes of an SQLAlchemy pool's connection record."""

    def __init__(self, conn: Any) -> None:
        self.driver_connection = conn

    def detach(self) -> None:
        pass

    def close(self) -> None:
        self.driver_connection.close()


class _Connector:
    """Hands out new driver connections, as an engine's ``raw_connection()`` does."""

    def __init__(self, connect: Any) -> None:
        self._connect = connect

    def raw_connection(self) -> _Raw:
        return _Raw(self._connect())


def sqlite_path(url: str) -> str | None:
    """The file an ``sqlite:///…`` URL names; None for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in SQLITE_SCHEMES or parts.query or parts.netloc:
        return None
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    return path if path and path != ":memory:" and not path.startswith("file:") else None


class LiteIntake:
    """:meth:`accept` and :meth:`enqueue_many` of SqlStore on a driver connection; raises
    NotLite when the full store must take over."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._doorbell: Doorbell | None = None
        scheme = urlsplit(url).scheme
        if scheme in SQLITE_SCHEMES:
            path = sqlite_path(url)
            if path is None or not os.path.exists(path):
                raise NotLite(url)
            self.is_postgres = False
            self._doorbell = Doorbell(path)
            self._hot: HotPath = SqliteHotPath(_Connector(lambda: _sqlite(path)),
                                               lambda exc: isinstance(exc, sqlite3.Error))
        elif scheme in POSTGRES_SCHEMES:
            # read as SQLAlchemy would, with the full store's defaults
            conninfo = libpq_conninfo(url)
            if conninfo is None:
                raise NotLite(url)
            import psycopg

            self.is_postgres = True
            self._hot = PostgresHotPath(_Connector(lambda: psycopg.connect(conninfo)),
                                        lambda exc: isinstance(exc, psycopg.Error))
        else:
            raise NotLite(url)

    def check_schema(self) -> None:
        """NotLite unless the database is at this code's revision (and answers)."""
        try:
            rows = self._hot.execute(VERSION_QUERY, {})
        except Exception as exc:
            raise NotLite(str(exc)) from exc
        if [r[0] for r in rows] != [migrations.HEAD]:
            raise NotLite(f"schema at {rows!r}")

    def accept(self, *, target: str, body_class: str | None, body: str,
               source: str | None = None, session_id: int | None = None,
               now: datetime | None = None, idempotency_key: str | None = None,
               trace_context: str | None = None, waited: bool = False,
               durable: bool = True, search_paths: Sequence[str] = ()) -> Accepted:
        accepted = self._hot.accept(target, body_class, body, source=source,
                                    session_id=session_id, now=now or utcnow(),
                                    idempotency_key=idempotency_key,
                                    trace_context=trace_context, waited=waited,
                                    durable=durable, search_paths=search_paths)
        if accepted.created:
            self._ring(target, urgent=waited)
        return accepted

    def enqueue_many(self, *, target: str, bodies: list[tuple[str | None, str]],
                     source: str | None = None, session_id: int | None = None,
                     now: datetime | None = None,
                     trace_context: str | None = None,
                     search_paths: Sequence[str] = ()) -> list[int]:
        if not bodies:
            return []
        ids = self._hot.enqueue_many(target, bodies, source=source, session_id=session_id,
                                     now=now or utcnow(), trace_context=trace_context,
                                     search_paths=search_paths)
        self._ring(target)
        return ids

    def _ring(self, target: str, urgent: bool = False) -> None:
        if self._doorbell is not None:  # PostgreSQL: the NOTIFY went with the INSERT
            self._doorbell.ring([Announcement.work(target, urgent=urgent)])

    def dispose(self) -> None:
        self._hot.dispose()


def _sqlite(path: str) -> sqlite3.Connection:
    """A connection as the engine's SQLite connections are (database.py)."""
    create_private_file(path)
    conn = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT, check_same_thread=False,
                           isolation_level=None)
    for pragma in SQLITE_PRAGMAS:
        conn.execute(f"PRAGMA {pragma}")
    return conn
