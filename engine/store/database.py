"""Database connections: SQLite (WAL, the embedded default) and PostgreSQL (psycopg).
SQLAlchemy is imported only where an engine is made (``encore send`` runs without it)."""
from __future__ import annotations

import os
import re
import select
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

if TYPE_CHECKING:
    from sqlalchemy import Engine

DEFAULT_DATABASE_URL = "sqlite:///encore.db"
SQLITE_BUSY_TIMEOUT = 30  # seconds a writer waits for the write lock
READ_ONLY = "encore_read_only"  # execution option of connections that only read
SQLITE_FILE_MODE = 0o600  # a new SQLite database: readable and writable by its owner only


# libpq settings unless the URL says otherwise: a gone server is given up within seconds, so
# the next host of a multi-host URL is tried (docs/scale-out.md)
POSTGRES_DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "2",
    "tcp_user_timeout": "10000",
    # a frozen daemon must not hold row locks mid-transaction (our transactions never wait)
    "options": "-c idle_in_transaction_session_timeout=10000",
}
MULTI_HOST_DEFAULTS = {"target_session_attrs": "read-write"}
POSTGRES_SCHEME = "postgresql+psycopg"
READ_ONLY_SQLSTATE = "25006"  # a standby, or a demoted primary
_HOST_PORT = re.compile(r"^([a-zA-Z0-9\-.]*)(?::(\d*))?$")  # as SQLAlchemy tests h:p


def normalise_url(url: str) -> str:
    """Map ``postgresql://`` to psycopg 3, and libpq's multi-host authority to SQLAlchemy's
    ``?host=h1:5432&host=h2:5432`` form."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            url = f"{POSTGRES_SCHEME}://" + url[len(prefix):]
            break
    return _hosts_to_query(url) if url.startswith(f"{POSTGRES_SCHEME}://") else url


def _hosts_to_query(url: str) -> str:
    """``url`` with several authority hosts moved to ``host`` query parameters."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    userinfo, at, hosts = parts.netloc.rpartition("@")
    query = parse_qs(parts.query)
    if "," not in hosts or "[" in hosts or "host" in query or "port" in query:
        return url  # both forms at once: SQLAlchemy reports it
    params = "&".join(f"host={quote(h, safe=':')}" for h in hosts.split(","))
    return (f"{parts.scheme}://{userinfo}{at}{parts.path or '/'}?{params}"
            + (f"&{parts.query}" if parts.query else ""))


def _host_count(hosts: Any) -> int:
    """How many hosts a URL's ``host`` query value names."""
    if not hosts:
        return 1
    if isinstance(hosts, str):
        return len(hosts.split(","))
    return sum(len(h.split(",")) for h in hosts)


def postgres_defaults(given: Any, hosts: int) -> dict[str, str]:
    """The settings of :data:`POSTGRES_DEFAULTS` (and :data:`MULTI_HOST_DEFAULTS`) that
    ``given`` does not set."""
    wanted = {**POSTGRES_DEFAULTS, **(MULTI_HOST_DEFAULTS if hosts > 1 else {})}
    return {key: value for key, value in wanted.items() if key not in given}


def libpq_conninfo(url: str) -> str | None:
    """libpq's connection string for a PostgreSQL ``url``, read as SQLAlchemy's psycopg
    dialect reads it, with :func:`postgres_defaults`, without SQLAlchemy. None for another
    URL or one it cannot read with certainty (SQLAlchemy then says what is wrong)."""
    url = normalise_url(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme != POSTGRES_SCHEME or parts.fragment:
        return None
    query = parse_qs(parts.query, keep_blank_values=True)
    if any(len(values) > 1 for key, values in query.items() if key != "host"):
        return None
    params = {key: values[0] for key, values in query.items() if key != "host"}
    if "host" in query:
        if parts.hostname or port is not None:
            return None
        hosts = query["host"]
        if len(hosts) > 1 or (":" in hosts[0] and "port" not in params):
            if "port" in params:
                return None
            pairs = [_HOST_PORT.match(h) for h in hosts]
            if not all(pairs):
                return None
            params["host"] = ",".join(m.group(1) for m in pairs if m)
            ports = ",".join(m.group(2) or "" for m in pairs if m)
            if ports:
                params["port"] = ports
        else:
            params["host"] = hosts[0]
    elif parts.hostname:
        if "%" in parts.netloc.rpartition("@")[2]:
            return None  # an encoded socket path
        params["host"] = parts.hostname
        if port is not None:
            params["port"] = str(port)
    if parts.username:
        params["user"] = unquote(parts.username)
    if parts.password is not None:
        params["password"] = unquote(parts.password)
    if parts.path[1:]:
        params["dbname"] = unquote(parts.path[1:])
    params.update(postgres_defaults(params, _host_count(params.get("host"))))
    return " ".join(f"{key}='{_conninfo_quote(value)}'" for key, value in params.items())


def _conninfo_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def connection_looks_dead(conn: Any) -> bool:
    """True if the idle PostgreSQL connection ``conn`` is closed, broken, or readable (the
    server's goodbye); a socket look, no round trip. Never for SQLite."""
    if getattr(conn, "closed", False) or getattr(conn, "broken", False):
        return True
    fileno = getattr(conn, "fileno", None)
    if fileno is None or not hasattr(select, "poll"):
        return False
    try:
        fd = fileno()
    except Exception:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def create_db_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite writers use ``BEGIN IMMEDIATE`` so they queue on the
    busy timeout instead of failing on a lock upgrade."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.pool import StaticPool

    url = normalise_url(url)
    if not url.startswith("sqlite"):
        return _postgres_engine(url) if url.startswith(POSTGRES_SCHEME) else create_engine(
            url, pool_size=10, max_overflow=20)
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


def _postgres_engine(url: str) -> Engine:
    """A PostgreSQL engine that leaves a dead or read-only server behind by itself: a dead
    pooled connection or a read-only error invalidates the pool, durable commits wait for
    the synchronous standby, and :func:`postgres_defaults` applies (docs/scale-out.md)."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    defaults = postgres_defaults(parsed.query, _host_count(parsed.query.get("host")))
    engine = create_engine(parsed, pool_size=10, max_overflow=20, connect_args=defaults)
    event.listen(engine, "connect", _postgres_on_connect)
    event.listen(engine, "checkout", _postgres_on_checkout)
    event.listen(engine, "handle_error", _postgres_on_error)
    return engine


def _postgres_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SELECT set_config('synchronous_commit', 'on', false) "
                       "WHERE current_setting('synchronous_commit') IN ('off', 'local')")
    finally:
        cursor.close()
    dbapi_connection.commit()


def _postgres_on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    if connection_looks_dead(dbapi_connection):
        from sqlalchemy.exc import InvalidatePoolError

        raise InvalidatePoolError("the server closed a pooled connection")


def _postgres_on_error(context: Any) -> None:
    if getattr(context.original_exception, "sqlstate", None) == READ_ONLY_SQLSTATE:
        context.is_disconnect = True


def sqlite_file(url: str) -> str | None:
    """The file of an SQLite ``url``; None for an in-memory database or a ``file:`` URI."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.database in (None, "", ":memory:") or parsed.query.get("uri"):
        return None
    return parsed.database


def create_private_file(path: str) -> None:
    """Create the SQLite file ``path`` with mode :data:`SQLITE_FILE_MODE` unless it exists;
    SQLite gives its WAL and shm files the same mode."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, SQLITE_FILE_MODE)
    except OSError:
        return
    try:
        os.fchmod(fd, SQLITE_FILE_MODE)
    finally:
        os.close(fd)


SQLITE_PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON",
                  f"busy_timeout={SQLITE_BUSY_TIMEOUT * 1000}")


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            _sqlite_pragma(cursor, pragma)
    finally:
        cursor.close()


def _sqlite_pragma(cursor: Any, pragma: str, *, wait: float = SQLITE_BUSY_TIMEOUT) -> None:
    """Run ``PRAGMA pragma``, retrying "locked" for up to ``wait`` seconds: connections
    switching a new file to WAL together get it at once, without the busy timeout."""
    import sqlite3
    import time

    deadline = time.monotonic() + wait
    pause = 0.001
    while True:
        try:
            cursor.execute(f"PRAGMA {pragma}")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _sqlite_on_begin(conn: Any) -> None:
    # reads (READ_ONLY) skip the write lock: with WAL they never wait for a writer
    read_only = conn.get_execution_options().get(READ_ONLY, False)
    conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def reason_of(exc: BaseException) -> str:
    """The driver's one-line reason for ``exc``, never the SQL or its parameters."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
