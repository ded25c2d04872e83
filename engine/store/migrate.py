"""Alembic, driven from code: the migrations ship inside the installed distribution.

Concurrent upgrades are serialised (an advisory lock on PostgreSQL, ``BEGIN IMMEDIATE`` on
SQLite); a newer schema is refused. The check reads ``alembic_version`` with plain SQL and
imports Alembic only to upgrade or when the revision differs from :data:`migrations.HEAD`.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import SQLAlchemyError

import migrations
from engine.clock import utcnow
from engine.errors import StoreError
from engine.store.database import READ_ONLY, reason_of
from engine.store.eventlog import LifeStep
from engine.store.models import event_log

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

MIGRATION_LOCK_KEY = 0x456E636F7265  # "Encore"
VERSION_TABLE = "alembic_version"


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Apply every revision up to ``revision``, one process at a time; return the revision
    the database was at before (None: no Encore tables). An upgrade of existing tables
    writes an ``Info`` lifecycle event. StoreError for a schema newer than this code."""
    try:
        if engine.dialect.name != "postgresql":
            return _upgrade(engine, revision)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as lock:
            lock.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            try:
                return _upgrade(engine, revision)
            finally:
                lock.execute(text("SELECT pg_advisory_unlock(:key)"),
                             {"key": MIGRATION_LOCK_KEY})
    except SQLAlchemyError as exc:
        raise StoreError(f"database upgrade failed: {reason_of(exc)}") from exc


def _upgrade(engine: Engine, revision: str) -> str | None:
    """:func:`upgrade`'s work, under its lock: the revision the database was at before."""
    from alembic import command

    before = current_revision(engine)
    _check_known(engine, before)
    command.upgrade(alembic_config(engine), revision)
    after = current_revision(engine)
    if before is not None and after != before:
        with engine.begin() as conn:
            conn.execute(event_log.insert().values(
                time_logged=utcnow(), type="Info", source_class="Database",
                source_method=str(LifeStep.UPGRADE),
                text=f"database schema upgraded from revision {before} to {after}"))
    return before


def check(engine: Engine) -> None:
    """Raise StoreError, saying what to do, unless the database is at this code's head."""
    try:
        current = current_revision(engine)
    except SQLAlchemyError as exc:
        raise StoreError(f"database unavailable: {reason_of(exc)}") from exc
    if current == migrations.HEAD:
        return
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
    """The revision the database is at (None: no Encore tables), without Alembic."""
    with engine.connect().execution_options(**{READ_ONLY: True}) as conn:
        if not inspect(conn).has_table(VERSION_TABLE):
            return None
        versions = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(versions) > 1:
        raise StoreError(f"the database's {VERSION_TABLE} table holds several revisions "
                         f"({', '.join(versions)}); Encore's migrations are one line")
    return versions[0] if versions else None


def _check_known(engine: Engine, current: str | None = None) -> None:
    current = current_revision(engine) if current is None else current
    if current is not None and current not in known_revisions(engine):
        raise StoreError(
            f"database schema is at revision {current}, newer than this Encore knows (its "
            f"latest is {head_revision(engine)}): the database was upgraded by a newer "
            "Encore; run that version here too (do not run `encore db upgrade` with this one)")


def _script(engine: Engine) -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config(engine))
