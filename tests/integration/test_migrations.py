"""The Alembic revisions build exactly the tables the models describe, on every database."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

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
    except Exception as exc:  # noqa: BLE001
        assert "encore db upgrade" in str(exc)
    else:
        raise AssertionError("an empty database passed the schema check")
    store.upgrade()
    store.check_schema()
    store.dispose()
