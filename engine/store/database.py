"""Database connections: SQLite (WAL, the embedded default) and PostgreSQL (psycopg)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import StaticPool

DEFAULT_DATABASE_URL = "sqlite:///encore.db"
SQLITE_BUSY_TIMEOUT = 30  # seconds a writer waits for the write lock


def normalise_url(url: str) -> str:
    """Accept plain ``postgresql://`` and map it to the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def create_db_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL and ``BEGIN IMMEDIATE`` transactions, so that
    writers queue on the busy timeout instead of failing on a lock upgrade."""
    url = normalise_url(url)
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False,
                                               "timeout": SQLITE_BUSY_TIMEOUT}}
    if url in ("sqlite://", "sqlite:///:memory:"):
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, **kwargs)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT * 1000}")
    cursor.close()


def _sqlite_on_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")
