"""Opening the store a command names, with one plain sentence on failure (never the password).
SQLAlchemy is imported only when a store is opened."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from engine.errors import StoreError
from engine.store.url import checked_url, missing_sqlite_directory, missing_sqlite_file, safe_url

if TYPE_CHECKING:
    from engine.store.sql import SqlStore


def open_store(url: str, *, need_schema: bool = True) -> SqlStore:
    """A :class:`SqlStore` on ``url`` after one proving connection (``need_schema``: and
    this Encore's tables); StoreError says what is wrong and what to run."""
    from sqlalchemy.exc import ArgumentError

    from engine.store.sql import SqlStore

    parsed = checked_url(url)
    if (directory := missing_sqlite_directory(parsed)) is not None:
        raise StoreError(f"the database {safe_url(url)} cannot be created: its directory "
                         f"{directory} does not exist; create it (mkdir -p {directory}), "
                         "then run `encore db upgrade`")
    if need_schema and missing_sqlite_file(parsed):
        raise StoreError(f"the database {safe_url(url)} does not exist yet; "
                         "run `encore db upgrade` to create it")
    try:
        store = SqlStore(url)
    except (ArgumentError, ImportError) as exc:
        raise StoreError(f"cannot use the database {safe_url(url)}: {first_line(exc)}"
                         ) from exc
    try:
        _check_database(store, need_schema=need_schema)
    except StoreError:
        store.dispose()
        raise
    return store


def _check_database(store: SqlStore, *, need_schema: bool) -> None:
    """Connect once; with ``need_schema``, require this Encore's schema."""
    from sqlalchemy.exc import SQLAlchemyError

    from engine.store import migrate

    try:
        current = migrate.current_revision(store.engine)
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot connect to the database {safe_url(store.url)}: "
                         f"{first_line(exc)}; check that it is running and that the "
                         "production file's database (or ENCORE_DATABASE_URL) is right"
                         ) from exc
    if not need_schema:
        return
    if current is None:
        raise StoreError(f"the database {safe_url(store.url)} has no Encore tables; "
                         "run `encore db upgrade`")
    store.check_schema()


def first_line(exc: BaseException) -> str:
    """The driver's reason for a database error, without SQL, parameters or links."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def is_database_error(exc: BaseException) -> bool:
    """True for an SQLAlchemy error (none can be raised before SQLAlchemy was imported)."""
    loaded = sys.modules.get("sqlalchemy.exc")
    return loaded is not None and isinstance(exc, loaded.SQLAlchemyError)
