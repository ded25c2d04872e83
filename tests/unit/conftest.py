"""Unit tests run on an in-memory SQLite store: no files, no network."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.store.sql import SqlStore


@pytest.fixture(scope="session")
def memory_template() -> Iterator[SqlStore]:
    """An in-memory store migrated to the latest schema once per process: what ``store``
    starts as a copy of (SQLite's backup API), at a thirtieth of a migration's cost."""
    s = SqlStore("sqlite://")
    s.upgrade()
    yield s
    s.dispose()


@pytest.fixture
def store(memory_template: SqlStore) -> Iterator[SqlStore]:
    """An in-memory store at the latest schema (overrides the every-database fixture)."""
    s = SqlStore("sqlite://")
    with memory_template.engine.connect() as source, s.engine.connect() as target:
        copied, copy = source.connection.driver_connection, target.connection.driver_connection
        assert copied is not None and copy is not None
        copied.backup(copy)
    yield s
    s.dispose()
