"""In-memory SQLite stores at the latest schema, for the virtual daemon and tests.

Running every migration costs tens of milliseconds, hundreds under load; copying a migrated
database with SQLite's backup API costs a fraction of one. So the first store of a process
is migrated and kept as the template, and each store after is a copy of its pages: the
same tables, indexes and ``alembic_version`` row as a migrated one.
"""
from __future__ import annotations

import threading

from engine.store.sql import SqlStore

MEMORY_URL = "sqlite://"

_template: SqlStore | None = None
_lock = threading.Lock()  # one backup at a time reads the template's single connection


def memory_store() -> SqlStore:
    """A new, empty in-memory SQLite store at the latest schema."""
    global _template
    store = SqlStore(MEMORY_URL)
    with _lock:
        if _template is None:
            template = SqlStore(MEMORY_URL)
            template.upgrade()
            _template = template
        with _template.engine.connect() as source, store.engine.connect() as target:
            copied = source.connection.driver_connection
            copy = target.connection.driver_connection
            assert copied is not None and copy is not None
            copied.backup(copy)
    return store
