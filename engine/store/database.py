"""Database connections: SQLite (WAL, the embedded default) and PostgreSQL (psycopg)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import StaticPool

DEFAULT_DATABASE_URL = "sqlite:///encore.db"
SQLITE_BUSY_TIMEOUT = 30  # seconds a writer waits for the write lock
READ_ONLY = "encore_read_only"  # execution option of connections that only read


def normalise_url(url: str) -> str:
    """Accept plain ``postgresql://`` and map it to the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def create_db_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL and ``BEGIN IMMEDIATE`` write transactions, so
    that writers queue on the busy timeout instead of failing on a lock upgrade."""
    url = normalise_url(url)
    if not url.startswith("sqlite"):
        # No pre-ping: it would cost a round trip per transaction. A connection the server
        # dropped fails one transaction (the worker retries) and SQLAlchemy then refreshes the
        # pool.
        return create_engine(url, pool_size=10, max_overflow=20)
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
    # Writers take the write lock up front; reads (execution option READ_ONLY) do not, so
    # with WAL they never wait for a writer.
    read_only = conn.get_execution_options().get(READ_ONLY, False)
    conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def reason_of(exc: BaseException) -> str:
    """The driver's reason for a database error, in one line: never the SQL statement or
    its bound parameters (message bodies), which SQLAlchemy appends to its messages."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
