"""Unit tests run on an in-memory SQLite store: no files, no network."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.store.memory import memory_store
from engine.store.sql import SqlStore


@pytest.fixture
def store() -> Iterator[SqlStore]:
    """An in-memory store at the latest schema (overrides the every-database fixture)."""
    s = memory_store()
    yield s
    s.dispose()
