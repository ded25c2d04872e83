"""Fixtures shared by the whole suite: one store fixture over every database.

PostgreSQL tests need ``ENCORE_TEST_POSTGRES_URL`` (a database they may wipe). Without it
they skip; CI sets it, so there they run — and fail if the server is not there.

A store starts as a copy of a template at the latest schema, migrated once per worker (a
PostgreSQL database copied by ``CREATE DATABASE ... TEMPLATE``, an SQLite file copied as a
file): a migration per test cost more than the rest of many a test. Each test still has a
database of its own, as a fresh migration would leave it.
"""
from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from sqlalchemy import Engine, create_engine, make_url, text

from engine.store.database import normalise_url, sqlite_file
from engine.store.sql import SqlStore

POSTGRES_ENV = "ENCORE_TEST_POSTGRES_URL"


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``dialect_free`` gets ``database_url`` (and so ``store``) on SQLite
    only, unless it names its dialects itself (``parametrize("database_url", ...,
    indirect=True)``): what it tests does not depend on the store's dialect, and running it
    twice cost the suite time and told nothing more."""
    if (metafunc.definition.get_closest_marker("dialect_free") is None
            or "database_url" not in metafunc.fixturenames
            or any("database_url" in str(mark.args[0]) for mark
                   in metafunc.definition.iter_markers("parametrize"))):
        return
    metafunc.definition.add_marker(
        pytest.mark.parametrize("database_url", ["sqlite"], indirect=True))


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


def _admin(url: str) -> Engine:
    """An engine on the server's ``postgres`` database, for creating and dropping others."""
    return create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")


def drop_database(url: str) -> None:
    """Drop the database of ``url``, closing its connections first (a daemon a test killed
    may have left one, and the worker's own pools still hold theirs)."""
    admin = _admin(url)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    finally:
        admin.dispose()


def copy_template(url: str) -> None:
    """Replace the database of ``url`` with a copy of :func:`postgres_template`: the latest
    schema and no rows, as a migration would leave it, at a fraction of a migration's cost.
    The connections still open on the old database (a killed daemon's, a store a test left
    to the garbage collector) are closed with it."""
    name, template = make_url(url).database, make_url(postgres_template(url)).database
    admin = _admin(url)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    finally:
        admin.dispose()


@functools.cache
def postgres_template(url: str) -> str:
    """A database beside ``url``'s (``<name>_template``), migrated to the latest schema once
    per process: what :func:`copy_template` copies. PostgreSQL copies a database only while
    nobody is connected to it, so no connection is left open on it."""
    template = make_url(url).set(database=f"{make_url(url).database}_template")
    rendered = template.render_as_string(hide_password=False)
    drop_database(rendered)
    admin = _admin(url)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{template.database}"'))
    finally:
        admin.dispose()
    store = SqlStore(rendered)
    try:
        store.upgrade()
    finally:
        store.dispose()
    return rendered


def pytest_sessionfinish(session: pytest.Session) -> None:
    """At the end of a run: drop the databases this process made, a worker's own database
    (:func:`postgres_url`) and the template (:func:`postgres_template`), so that none is
    left behind."""
    url, worker = os.environ.get(POSTGRES_ENV), os.environ.get("PYTEST_XDIST_WORKER")
    if not url:
        return
    own = normalise_url(url) if not worker else _worker_database(normalise_url(url), worker)
    made = [own] if worker and _worker_database.cache_info().currsize else []
    if postgres_template.cache_info().currsize:
        made.append(postgres_template(own))
    try:
        for database in made:
            drop_database(database)
    except Exception as exc:  # the run's result stands; say what is left
        sys.stderr.write(f"\nthe PostgreSQL databases {made} were not all dropped: {exc}\n")


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


@pytest.fixture(autouse=True)
def cli_in_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a test marked ``cli_in_process``: ``encore(...)`` (tests/acceptance/daemon.py)
    runs its commands in this process, not as processes of their own."""
    if request.node.get_closest_marker("cli_in_process") is None:
        yield
        return
    from tests.acceptance.daemon import commands_in_process

    with commands_in_process():
        yield


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite file at the latest schema, migrated once per process: what ``store``
    copies on SQLite."""
    path = tmp_path_factory.mktemp("template") / "encore.db"
    store = SqlStore(f"sqlite:///{path}")
    try:
        store.upgrade()
    finally:
        store.dispose()  # its last connection closed: the WAL is written back into the file
    return path


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
    """A store at the latest schema on the PostgreSQL test database only (for what only
    PostgreSQL has: LISTEN/NOTIFY, commits on several connections at once)."""
    url = postgres_url()
    copy_template(url)
    s = SqlStore(url)
    yield s
    s.dispose()


@pytest.fixture
def store(request: pytest.FixtureRequest, database_url: str) -> Iterator[SqlStore]:
    """A store at the latest schema, on every database: ``database_url`` made a copy of the
    template (an SQLite file another fixture began is upgraded instead)."""
    path = sqlite_file(database_url) if database_url.startswith("sqlite") else None
    began = path is not None and os.path.exists(path)
    if path is None:
        copy_template(database_url)
    elif not began:
        shutil.copy2(request.getfixturevalue("sqlite_template"), path)  # its mode too
    s = SqlStore(database_url)
    if began:
        s.upgrade()
    yield s
    s.dispose()
