"""The Alembic revisions build exactly the tables the models describe, on every database."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

import migrations
from engine.store import migrate
from engine.store.memory import memory_store
from engine.store.models import metadata
from engine.store.sql import SqlStore


def test_upgrading_an_empty_database_gives_exactly_the_models(database_url: str) -> None:
    store = SqlStore(database_url)
    store.upgrade()
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
        tables = set(inspect(conn).get_table_names())
    store.dispose()
    assert diff == []
    assert {"event_log", "message_header", "message_attempt"} <= tables


def test_a_database_behind_the_code_is_refused_until_upgraded(database_url: str) -> None:
    store = SqlStore(database_url)
    try:
        store.check_schema()
    except Exception as exc:
        assert "encore db upgrade" in str(exc)
    else:
        raise AssertionError("an empty database passed the schema check")
    store.upgrade()
    store.check_schema()
    store.dispose()


def test_the_head_the_quick_schema_check_compares_with_is_alembics() -> None:
    """``migrations.HEAD`` spares every command Alembic's import (engine/store/migrate.py);
    a stale one would only cost time, but it must name the newest revision."""
    store = SqlStore("sqlite://")
    try:
        assert migrations.HEAD == migrate.head_revision(store.engine)
    finally:
        store.dispose()


def test_the_revision_is_read_without_alembic_as_alembic_reads_it(database_url: str) -> None:
    store = SqlStore(database_url)
    try:
        assert migrate.current_revision(store.engine) is None  # no tables at all
        store.upgrade()
        with store.engine.connect() as conn:
            expected = MigrationContext.configure(conn).get_current_revision()
        assert migrate.current_revision(store.engine) == expected == migrations.HEAD
    finally:
        store.dispose()


def _whole_database(store: SqlStore) -> tuple[list[tuple[object, ...]], dict[str, object]]:
    """Every schema object's definition (tables with their columns, indexes, triggers) and
    every table's rows (``alembic_version`` among them)."""
    with store.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        schema = raw.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                             "ORDER BY type, name").fetchall()
        rows = {name: raw.execute(f'SELECT * FROM "{name}" ORDER BY 1').fetchall()
                for kind, name, _table, _sql in schema if kind == "table"}
        rows["user_version"] = raw.execute("PRAGMA user_version").fetchall()
    return schema, rows


def test_a_copied_memory_store_is_a_migrated_one() -> None:
    """memory_store() copies one migrated template: each copy is what a migration makes, and
    a write to one copy is in no other."""
    migrated = SqlStore("sqlite://")
    migrated.upgrade()
    first, second = memory_store(), memory_store()
    try:
        schema, rows = _whole_database(migrated)
        assert any(kind == "index" for kind, *_ in schema)
        assert rows["alembic_version"] == [(migrations.HEAD,)]
        assert _whole_database(first) == _whole_database(second) == (schema, rows)
        first.events.write("Info", "only in the first copy")
        assert _whole_database(first)[1]["event_log"] != rows["event_log"]
        assert _whole_database(second) == (schema, rows)
    finally:
        for store in (migrated, first, second):
            store.dispose()
