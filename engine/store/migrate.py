"""Alembic, driven from code: the migrations ship inside the installed distribution.

Several daemons (or ``encore db upgrade`` on several hosts) may upgrade one database at once:
on PostgreSQL the upgrade runs under a session advisory lock, so the others wait and then
find the schema at head; on SQLite the migration's ``BEGIN IMMEDIATE`` transaction already
serialises them. A database migrated by a newer Encore (a revision this code does not have)
is refused, never downgraded or half-upgraded.

Every command checks the schema before it touches the database. Alembic (and the scripts of
every revision) costs a tenth of a second to import, so the check reads ``alembic_version``
with plain SQL and compares it with :data:`migrations.HEAD`; Alembic is imported only to
upgrade, or when the two differ (then it decides, so a stale ``HEAD`` costs time, never
correctness).
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

MIGRATION_LOCK_KEY = 0x456E636F7265  # pg_advisory_lock key held during an upgrade ("Encore")
VERSION_TABLE = "alembic_version"  # where Alembic keeps the revision a database is at


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Apply every revision up to ``revision``, one process at a time (see module doc), and
    return the revision the database was at before (None: it had no Encore tables) — on
    PostgreSQL read under the lock, so a racing upgrade that did the work first is not
    claimed as ours (on SQLite two upgrades at the very same moment may both claim it).
    An upgrade of existing tables writes one ``Info`` event of the production's life
    (docs/operating.md); creating them writes none. Raises StoreError for a schema newer
    than this code."""
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
    """Raise StoreError unless the database is at this code's head revision, saying what to
    do: ``encore db upgrade`` for an older schema, a newer Encore for a newer one."""
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
    """The revision the database is at (None: no Encore tables), read like Alembic's
    ``MigrationContext.get_current_revision`` but without importing Alembic."""
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
