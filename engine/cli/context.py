"""The context object every ``encore`` command gets: the production file read lazily, the
store opened when a command first needs it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from engine.config.production import (
    ProductionConfig,
    ProductionOutline,
    absolute_sqlite_url,
    find_production_file,
    read_outline,
)
from engine.store.database import DEFAULT_DATABASE_URL
from engine.store.opening import open_store

if TYPE_CHECKING:
    from engine.store.sql import SqlStore


class Context:
    """Lazily reads the production file and opens the store for a command; ``outline``
    imports none of the items' classes, ``production`` imports them all."""

    def __init__(self, production_option: str | None) -> None:
        self.option = production_option
        self._outline: ProductionOutline | None = None
        self._production: ProductionConfig | None = None
        self._store: SqlStore | None = None

    @property
    def outline(self) -> ProductionOutline:
        if self._outline is None:
            self._outline = read_outline(find_production_file(self.option, os.environ))
        return self._outline

    @property
    def production(self) -> ProductionConfig:
        if self._production is None:
            self._production = self.outline.resolve()
        return self._production

    def database_url(self) -> str:
        """The production's database URL, SQLite paths made absolute (relative to the file's
        directory, or without a file to the current one)."""
        path = find_production_file(self.option, os.environ)
        if path.exists() or self.option:
            return self.outline.database
        return absolute_sqlite_url(os.environ.get("ENCORE_DATABASE_URL")
                                   or DEFAULT_DATABASE_URL, Path.cwd())

    @property
    def store(self) -> SqlStore:
        """The production's store, refused in one sentence when its database is not usable."""
        if self._store is None:
            self._store = open_store(self.database_url())
        return self._store

    @property
    def intake(self) -> Any:
        """Where ``encore send`` puts messages: a :class:`~engine.store.lite.LiteIntake`
        (no SQLAlchemy to import) when it can, else :attr:`store`."""
        if self._store is not None:
            return self._store
        from engine.store.lite import LiteIntake, NotLite

        try:
            lite = LiteIntake(self.database_url())
            try:
                lite.check_schema()
            except NotLite:
                lite.dispose()
                raise
        except (NotLite, ImportError):
            return self.store
        return lite

    def reachable_store(self) -> SqlStore:
        """The store, checked only for being reachable (for ``encore db upgrade``)."""
        if self._store is None:
            self._store = open_store(self.database_url(), need_schema=False)
        return self._store


pass_ctx = click.make_pass_decorator(Context)
