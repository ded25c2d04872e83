"""Opening the store a command names: one connection proves the database is there and, when
asked, holds this Encore's schema; otherwise one plain sentence says what is wrong and what to
run, the password never shown.

SQLAlchemy is imported when a store is opened, not with the module (``encore send`` imports
this module for :func:`first_line` and never needs SQLAlchemy)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from engine.errors import StoreError
from engine.store.url import checked_url, missing_sqlite_directory, missing_sqlite_file, safe_url

if TYPE_CHECKING:
    from engine.store.sql import SqlStore


def open_store(url: str, *, need_schema: bool = True) -> SqlStore:
    """A :class:`SqlStore` on ``url``, after one connection that proves the database is
    there and (``need_schema``) holds this Encore's tables. Raises :class:`StoreError`
    saying what is wrong and what to run; the password in ``url`` is never shown."""
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
    except (ArgumentError, ImportError) as exc:  # an unknown dialect, no driver
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
    store.check_schema()  # an older schema (upgrade) or a newer one (a newer Encore)


def first_line(exc: BaseException) -> str:
    """The driver's reason for a database error, without SQL, parameters or links."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def is_database_error(exc: BaseException) -> bool:
    """True for an SQLAlchemy error (none can be raised before SQLAlchemy was imported)."""
    loaded = sys.modules.get("sqlalchemy.exc")
    return loaded is not None and isinstance(exc, loaded.SQLAlchemyError)
