"""Database connections: SQLite (WAL, the embedded default) and PostgreSQL (psycopg).

SQLAlchemy is imported where an engine is made, not with the module: the production file's
reader and ``encore send`` name databases without it."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine

DEFAULT_DATABASE_URL = "sqlite:///encore.db"
SQLITE_BUSY_TIMEOUT = 30  # seconds a writer waits for the write lock
READ_ONLY = "encore_read_only"  # execution option of connections that only read
SQLITE_FILE_MODE = 0o600  # a new SQLite database: readable and writable by its owner only


def normalise_url(url: str) -> str:
    """Accept plain ``postgresql://`` and map it to the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def create_db_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL and ``BEGIN IMMEDIATE`` write transactions, so
    that writers queue on the busy timeout instead of failing on a lock upgrade."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.pool import StaticPool

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
    path = sqlite_file(url)
    if path is not None:
        event.listen(engine, "do_connect", lambda *_: create_private_file(path))
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def sqlite_file(url: str) -> str | None:
    """The file of an SQLite ``url``; None for an in-memory database or a ``file:`` URI."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.database in (None, "", ":memory:") or parsed.query.get("uri"):
        return None
    return parsed.database


def create_private_file(path: str) -> None:
    """Create the SQLite database file ``path``, empty, with mode :data:`SQLITE_FILE_MODE`
    whatever the umask, unless it exists. SQLite gives the WAL and shared-memory files it
    creates beside it the database file's mode, so message bodies and event texts stay
    unreadable to other users. An existing file keeps its mode; a path that cannot be
    created is left to the connection to report."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, SQLITE_FILE_MODE)
    except OSError:  # it exists (FileExistsError), or connecting will say what is wrong
        return
    try:
        os.fchmod(fd, SQLITE_FILE_MODE)
    finally:
        os.close(fd)


# what every SQLite connection of the engine runs first
SQLITE_PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON",
                  f"busy_timeout={SQLITE_BUSY_TIMEOUT * 1000}")


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
    cursor = dbapi_connection.cursor()
    for pragma in SQLITE_PRAGMAS:
        cursor.execute(f"PRAGMA {pragma}")
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
