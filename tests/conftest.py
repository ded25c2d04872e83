"""Fixtures shared by the whole suite: one store fixture over every database.

PostgreSQL tests need ``ENCORE_TEST_POSTGRES_URL`` (a database they may wipe). Without it
they skip; CI sets it, so there they run — and fail if the server is not there.
"""
from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from sqlalchemy import create_engine, make_url, text

from engine.store.database import normalise_url
from engine.store.sql import SqlStore

POSTGRES_ENV = "ENCORE_TEST_POSTGRES_URL"
# The longest tests (the short chaos campaign: three runs of a minute or more each) start
# first, so that the other workers share out the rest of the suite meanwhile, rather than
# wait for them at its end (worksteal deals the suite out in order, and steals from the end).
FIRST = ("tests/integration/test_chaos_short.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of the modules in ``FIRST`` before the others, the order otherwise kept."""
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in FIRST)


def postgres_url() -> str:
    """The test database; under pytest-xdist each worker gets a database of its own beside
    it (``<name>_gw0``, ...), created on first use, since tests wipe theirs."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"PostgreSQL tests need {POSTGRES_ENV} (CI sets it)")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return normalise_url(url) if not worker else _worker_database(normalise_url(url), worker)


@functools.cache
def _worker_database(url: str, worker: str) -> str:
    base = make_url(url)
    own = base.set(database=f"{base.database}_{worker}")
    admin = create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :name"),
                              {"name": own.database}).first()
        if not exists:
            conn.execute(text(f'CREATE DATABASE "{own.database}"'))
    admin.dispose()
    return own.render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    """Drop the database of ``url``, closing its connections first (a daemon a test killed
    may have left one, and the worker's own pools still hold theirs)."""
    own = make_url(url)
    admin = create_engine(own.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{own.database}" WITH (FORCE)'))
    finally:
        admin.dispose()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """At the end of a worker's run: drop the database :func:`postgres_url` made for it,
    so that none is left behind (a run without workers used the test database itself)."""
    url, worker = os.environ.get(POSTGRES_ENV), os.environ.get("PYTEST_XDIST_WORKER")
    if not url or not worker or not _worker_database.cache_info().currsize:
        return
    try:
        drop_database(_worker_database(normalise_url(url), worker))
    except Exception as exc:  # the run's result stands; say what is left
        sys.stderr.write(f"\nthe PostgreSQL database of worker {worker} was not dropped: "
                         f"{exc}\n")


def reset_postgres(url: str) -> None:
    """Drop every table of the test database (a clean slate for one test)."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(autouse=True, scope="session")
def quick_password_hashes() -> None:
    """Passwords hashed in the test process use argon2's cheapest parameters: the defaults
    cost a quarter of a second of CPU per hash and per check, and most portal tests make
    users and log them in (a daemon or command the tests start keeps the defaults, and
    re-hashes such a password at its first login there, as for any changed parameters)."""
    from engine.serving import auth
    auth._hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: a SQLite file, or the wiped PostgreSQL test database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'encore.db'}"
    url = postgres_url()
    reset_postgres(url)
    return url


@pytest.fixture
def pg_store() -> Iterator[SqlStore]:
    """A store at the latest schema on the wiped PostgreSQL test database only (for what
    only PostgreSQL has: LISTEN/NOTIFY, commits on several connections at once)."""
    url = postgres_url()
    reset_postgres(url)
    s = SqlStore(url)
    s.upgrade()
    yield s
    s.dispose()


@pytest.fixture
def store(database_url: str) -> Iterator[SqlStore]:
    """A store at the latest schema, on every database."""
    s = SqlStore(database_url)
    s.upgrade()
    yield s
    s.dispose()
