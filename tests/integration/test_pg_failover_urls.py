"""Multi-host PostgreSQL URLs (docs/architecture.md, "PostgreSQL with a standby"): every form the
daemon, the portal and the CLI accept is read the same way by SQLAlchemy (the full store)
and by ``encore send``'s path without it (engine.store.lite); what libpq is given unless the
URL says otherwise; a read-only session is dropped from the pool."""
from __future__ import annotations

import time

import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import DBAPIError

from engine.store.database import (
    MULTI_HOST_DEFAULTS,
    POSTGRES_DEFAULTS,
    create_db_engine,
    libpq_conninfo,
    normalise_url,
)
from engine.store.lite import LiteIntake, NotLite
from engine.store.sql import SqlStore
from engine.store.url import safe_url
from tests.conftest import postgres_url
from tests.waiting import wait_until

FORMS = [
    # SQLAlchemy's documented form: one host parameter per host
    "postgresql+psycopg://u:pw@/db?host=h1:5432&host=h2:5433&target_session_attrs=read-write",
    # libpq's comma lists, which SQLAlchemy passes on
    "postgresql+psycopg://u@/db?host=h1,h2&port=5432,5433",
    "postgresql://u@/db?host=h1,h2&port=5432,5433&sslmode=disable",
    # libpq's multi-host authority (SQLAlchemy cannot parse it; normalise_url rewrites it)
    "postgresql://u:p%40ss@h1:5432,h2:5433/db?application_name=encore",
    "postgres://u@h1,h2/db",
    # one host, as ever
    "postgresql://u@h1:5432/db",
    "postgresql+psycopg://u@/db?host=h1:6543",
    "postgresql://u@[::1]:5432/db",
    "postgresql+psycopg://u@/db?host=/var/run/postgresql",
]


class _Captured(Exception):
    pass


def sqlalchemy_params(url: str) -> dict[str, str]:
    """What the full store's engine hands psycopg to connect (the dialect's reading of the
    URL and the engine's connect arguments), caught before it connects."""
    engine = create_db_engine(url)
    seen: dict[str, str] = {}

    def capture(dialect: object, record: object, cargs: object, cparams: dict) -> None:
        seen.update({k: str(v) for k, v in cparams.items() if k != "context"})
        raise _Captured

    event.listen(engine, "do_connect", capture)
    with pytest.raises(_Captured):
        engine.connect()
    engine.dispose()
    return seen


@pytest.mark.parametrize("url", FORMS)
def test_the_lite_path_reads_every_form_as_sqlalchemy_does(url: str) -> None:
    conninfo = libpq_conninfo(url)
    assert conninfo is not None
    assert conninfo_to_dict(conninfo) == sqlalchemy_params(url)


@pytest.mark.parametrize("url", [u for u in FORMS if "," in u or u.count("host=") > 1])
def test_several_hosts_ask_for_the_read_write_server(url: str) -> None:
    for params in (conninfo_to_dict(libpq_conninfo(url) or ""), sqlalchemy_params(url)):
        assert params["target_session_attrs"] == "read-write"
        assert params["host"] == "h1,h2"


def test_what_the_url_says_wins_over_the_defaults() -> None:
    url = ("postgresql+psycopg://u@/db?host=h1:1&host=h2:2&target_session_attrs=any"
           "&connect_timeout=2&keepalives=0")
    for params in (conninfo_to_dict(libpq_conninfo(url) or ""), sqlalchemy_params(url)):
        assert (params["target_session_attrs"], params["connect_timeout"],
                params["keepalives"]) == ("any", "2", "0")
    single = conninfo_to_dict(libpq_conninfo("postgresql://u@h1/db") or "")
    assert "target_session_attrs" not in single  # one host: whatever it is
    assert set(POSTGRES_DEFAULTS) <= set(single)
    assert set(MULTI_HOST_DEFAULTS) <= set(conninfo_to_dict(
        libpq_conninfo("postgresql://u@h1,h2/db") or ""))


def test_the_comma_authority_becomes_sqlalchemys_form() -> None:
    assert normalise_url("postgresql://u:pw@h1:5432,h2:5433/db?sslmode=require") == (
        "postgresql+psycopg://u:pw@/db?host=h1:5432&host=h2:5433&sslmode=require")
    assert normalise_url("postgresql://u@h1/db") == "postgresql+psycopg://u@h1/db"
    shown = safe_url("postgresql://u:secret@h1:5432,h2:5433/db")
    assert "secret" not in shown and "h1" in shown and "h2" in shown


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://u@/db?host=h1&host=h2&port=1,2",  # both multi-host forms at once
    "postgresql+psycopg://u@h0/db?host=h1:1&host=h2:2",  # hosts in the authority and query
    "postgresql+psycopg://u@/db?host=h1:1&host=h2:2&sslmode=a&sslmode=b",  # an option twice
    "postgresql+psycopg2://u@h1/db",  # another driver
])
def test_a_url_the_lite_path_cannot_read_for_certain_goes_to_the_full_store(url: str) -> None:
    assert libpq_conninfo(url) is None
    with pytest.raises(NotLite):
        LiteIntake(url)


@pytest.mark.postgres
def test_a_session_gets_encores_connection_settings() -> None:
    store = SqlStore(postgres_url())
    try:
        raw = store.engine.raw_connection()
        params = raw.driver_connection.info.get_parameters()
        raw.close()
    finally:
        store.dispose()
    assert params["connect_timeout"] == POSTGRES_DEFAULTS["connect_timeout"]
    assert params["tcp_user_timeout"] == POSTGRES_DEFAULTS["tcp_user_timeout"]
    store = SqlStore(postgres_url())
    try:
        with store.engine.connect() as conn:
            limit = conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar()
    finally:
        store.dispose()
    assert limit == "10s"  # a session frozen inside a transaction holds its locks no longer


@pytest.mark.postgres
def test_a_daemon_frozen_inside_a_transaction_holds_its_messages_rows_only_so_long() -> None:
    """A daemon stopped (SIGSTOP, a paused VM) between a lease renewal's UPDATE and its
    commit holds the message's row lock; another daemon's expiry scan skips the locked row
    rather than wait for it. The server ends such a session after
    idle_in_transaction_session_timeout (10 s by default, 1 s here through the URL's own
    ``options``), and a later scan takes the claim back."""
    from datetime import timedelta

    from sqlalchemy import make_url

    from engine.clock import utcnow
    from tests.conftest import reset_postgres

    base = postgres_url()
    reset_postgres(base)
    url = make_url(base).update_query_dict(
        {"options": "-c idle_in_transaction_session_timeout=1000"}).render_as_string(
        hide_password=False)
    frozen, other = SqlStore(url), SqlStore(base)
    frozen.upgrade()
    held = frozen.engine.connect()
    try:
        mid = frozen.enqueue(target="A", body_class=None, body="{}")
        (claimed,) = frozen.claim("A", owner="frozen", now=utcnow(), lease_seconds=0.2)
        held.execute(text("UPDATE message_header SET lease_expires_at = lease_expires_at "
                          "WHERE id = :id"), {"id": mid})  # the renewal's lock, no commit
        def scan() -> int:
            return other.release_expired_claims("A", now=utcnow() + timedelta(seconds=1))

        started = time.monotonic()
        assert scan() == 0  # locked: skipped, not waited for
        assert time.monotonic() - started < 5
        wait_until(scan, 15, "a scan to take the expired claim back once the server ended "
                             "the frozen session")
        row = other.get_message(mid)
        assert row is not None and row.status == "Queued" and claimed.row.id == mid
    finally:
        held.invalidate()  # its session was ended by the server
        held.close()
        frozen.dispose()
        other.dispose()


@pytest.mark.postgres
def test_a_read_only_session_is_dropped_from_the_pool() -> None:
    # a session that refuses writes (as a standby's does) is a disconnect: SQLAlchemy drops
    # the connection and the pool, so the next transaction connects afresh
    url = postgres_url()
    url += ("&" if "?" in url else "?") + "options=-c%20default_transaction_read_only%3Don"
    store = SqlStore(url)
    try:
        with store.engine.connect() as conn:
            before = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        with pytest.raises(DBAPIError, match="read-only") as refused:
            with store.engine.begin() as conn:
                conn.execute(text("CREATE TABLE encore_read_only_probe (i int)"))
        assert refused.value.connection_invalidated
        with store.engine.connect() as conn:
            after = conn.execute(text("SELECT pg_backend_pid()")).scalar()
    finally:
        store.dispose()
    assert after != before


@pytest.mark.postgres
def test_a_session_whose_server_says_synchronous_commit_off_commits_durably() -> None:
    url = postgres_url()
    url += ("&" if "?" in url else "?") + "options=-c%20synchronous_commit%3Dlocal"
    store = SqlStore(url)
    plain = create_engine(url)
    try:
        with store.engine.connect() as conn:
            assert conn.execute(text("SHOW synchronous_commit")).scalar() == "on"
        with plain.connect() as conn:  # the server's default, for comparison
            assert conn.execute(text("SHOW synchronous_commit")).scalar() == "local"
    finally:
        store.dispose()
        plain.dispose()
