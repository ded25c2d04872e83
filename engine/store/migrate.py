"""Alembic, driven from code: the migrations ship inside the installed distribution.

Several daemons (or ``encore db upgrade`` on several hosts) may upgrade one database at once:
on PostgreSQL the upgrade runs under a session advisory lock, so the others wait and then
find the schema at head; on SQLite the migration's ``BEGIN IMMEDIATE`` transaction already
serialises them. A database migrated by a newer Encore (a revision this code does not have)
is refused, never downgraded or half-upgraded.
"""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

import migrations
from engine.errors import StoreError
from engine.store.database import reason_of

MIGRATION_LOCK_KEY = 0x456E636F7265  # pg_advisory_lock key held during an upgrade ("Encore")


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply every revision up to ``revision``, one process at a time (see module doc).
    Raises StoreError for a schema newer than this code."""
    try:
        if engine.dialect.name != "postgresql":
            _check_known(engine)
            command.upgrade(alembic_config(engine), revision)
            return
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as lock:
            lock.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            try:
                _check_known(engine)
                command.upgrade(alembic_config(engine), revision)
            finally:
                lock.execute(text("SELECT pg_advisory_unlock(:key)"),
                             {"key": MIGRATION_LOCK_KEY})
    except SQLAlchemyError as exc:
        raise StoreError(f"database upgrade failed: {reason_of(exc)}") from exc


def check(engine: Engine) -> None:
    """Raise StoreError unless the database is at this code's head revision, saying what to
    do: ``encore db upgrade`` for an older schema, a newer Encore for a newer one."""
    try:
        current = current_revision(engine)
    except SQLAlchemyError as exc:
        raise StoreError(f"database unavailable: {reason_of(exc)}") from exc
    head = head_revision(engine)
    if current == head:
        return
    _check_known(engine, current)
    raise StoreError(f"database schema is at revision {current or 'nothing (no tables)'}, "
                     f"older than this Encore needs ({head}): run `encore db upgrade`")


def head_revision(engine: Engine) -> str | None:
    return _script(engine).get_current_head()


def known_revisions(engine: Engine) -> set[str]:
    """Every revision this code ships."""
    return {rev.revision for rev in _script(engine).walk_revisions()}


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _check_known(engine: Engine, current: str | None = None) -> None:
    current = current_revision(engine) if current is None else current
    if current is not None and current not in known_revisions(engine):
        raise StoreError(
            f"database schema is at revision {current}, newer than this Encore knows (its "
            f"latest is {head_revision(engine)}): the database was upgraded by a newer "
            "Encore; run that version here too (do not run `encore db upgrade` with this one)")


def _script(engine: Engine) -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config(engine))
