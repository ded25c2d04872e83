"""Copying a production's whole database to another, SQLite to PostgreSQL and back
(``encore db copy``, docs/scale-out.md "Outgrowing SQLite").

Rows are copied as they were, in foreign-key order, into an upgraded empty target in one
transaction with counts checked on both sides, so a copy is whole or not at all; the target's
id sequences are then set past every id the source gave.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Table, func, inspect, select, text
from sqlalchemy.exc import SQLAlchemyError

from engine.clock import as_utc
from engine.errors import StoreError
from engine.store import migrate
from engine.store.database import reason_of
from engine.store.models import daemon, metadata

__all__ = ["DEFAULT_BATCH", "TableCount", "copy_database", "live_daemons", "row_counts"]

DEFAULT_BATCH = 1000

Progress = Callable[[str, int], None]  # (table, rows just written)


@dataclass(frozen=True)
class TableCount:
    """Rows of one table on the source and, after the copy, on the target."""

    table: str
    source: int
    target: int


def tables() -> list[Table]:
    """Every table of the schema, each after the tables its foreign keys name."""
    return list(metadata.sorted_tables)


def row_counts(engine: Engine) -> dict[str, int]:
    """Rows of each table, in foreign-key order."""
    with engine.connect() as conn:
        return {t.name: _count(conn, t) for t in tables()}


def live_daemons(engine: Engine, now: datetime, lease_seconds: float) -> list[str]:
    """``id (host, pid)`` of each daemon on ``engine`` with a heartbeat within
    ``lease_seconds`` of ``now``."""
    alive_after = now - timedelta(seconds=lease_seconds)
    with engine.connect() as conn:
        rows = conn.execute(select(daemon.c.id, daemon.c.host, daemon.c.pid,
                                   daemon.c.heartbeat_at)).all()
    return [f"{r.id} ({r.host}, pid {r.pid})" for r in rows
            if as_utc(r.heartbeat_at) >= alive_after]


def copy_database(source: Engine, target: Engine, *, batch: int = DEFAULT_BATCH,
                  progress: Progress | None = None) -> list[TableCount]:
    """Copy every row of ``source`` into ``target``; the row counts per table. StoreError,
    the target left as upgraded, for a source at another schema, a non-empty target, or
    counts that differ."""
    migrate.check(source)
    migrate.upgrade(target)
    counts = row_counts(source)
    _refuse_rows(target)
    try:
        with source.connect() as reading, target.begin() as writing:
            copied = []
            for table in tables():
                for rows in _batches(reading, table, batch):
                    writing.execute(table.insert(), rows)
                    if progress is not None:
                        progress(table.name, len(rows))
                copied.append(TableCount(table.name, counts[table.name],
                                         _count(writing, table)))
            _refuse_differences(copied)
            _set_sequences(reading, writing)
    except SQLAlchemyError as exc:
        raise StoreError(f"the copy failed and the target was left empty: "
                         f"{reason_of(exc)}") from exc
    return copied


def _batches(conn: Connection, table: Table, size: int) -> Iterator[list[dict[str, Any]]]:
    """``table``'s rows in primary-key order, ``size`` at a time, times aware UTC."""
    query = select(table).order_by(*table.primary_key.columns)
    result = conn.execution_options(yield_per=size).execute(query)
    for part in result.partitions():
        yield [{k: as_utc(v) if isinstance(v, datetime) else v
                for k, v in row._mapping.items()} for row in part]


def _count(conn: Connection, table: Table) -> int:
    return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _refuse_rows(target: Engine) -> None:
    full = {name: n for name, n in row_counts(target).items() if n}
    if full:
        held = ", ".join(f"{name} ({n})" for name, n in full.items())
        raise StoreError(f"the target database already holds rows: {held}; copy into an "
                         "empty database (a new SQLite file, or a new PostgreSQL database)")


def _refuse_differences(copied: list[TableCount]) -> None:
    wrong = [c for c in copied if c.source != c.target]
    if wrong:
        text_ = ", ".join(f"{c.table}: {c.source} on the source, {c.target} on the target"
                          for c in wrong)
        raise StoreError(f"row counts differ ({text_}); nothing was copied")


def _id_tables() -> list[Table]:
    """The tables whose primary key is an id the database gives."""
    return [t for t in tables() if [c.name for c in t.primary_key.columns] == ["id"]
            and t.c.id.autoincrement is True]


def _set_sequences(reading: Connection, writing: Connection) -> None:
    """Set the target's next id of each id table past the copied ids and the source's own."""
    for table in _id_tables():
        last = max(_last_id(reading, table), _max_id(writing, table))
        if not last:
            continue
        if writing.dialect.name == "postgresql":
            writing.execute(text("SELECT setval(pg_get_serial_sequence(:t, 'id'), :v)"),
                            {"t": table.name, "v": last})
        elif _has_sqlite_sequence(writing):
            writing.execute(text("UPDATE sqlite_sequence SET seq = :v WHERE name = :t"),
                            {"t": table.name, "v": last})


def _max_id(conn: Connection, table: Table) -> int:
    return int(conn.execute(select(func.max(table.c.id))).scalar_one() or 0)


def _last_id(conn: Connection, table: Table) -> int:
    """The last id the database gave ``table`` (0: none or unknown)."""
    if conn.dialect.name == "postgresql":
        row = conn.execute(text("SELECT pg_get_serial_sequence(:t, 'id')"),
                           {"t": table.name}).scalar_one()
        if row is None:
            return 0
        value = conn.execute(text(f"SELECT last_value, is_called FROM {row}")).one()
        return int(value.last_value) if value.is_called else 0
    if not _has_sqlite_sequence(conn):
        return 0
    seq = conn.execute(text("SELECT seq FROM sqlite_sequence WHERE name = :t"),
                       {"t": table.name}).scalar()
    return int(seq or 0)


def _has_sqlite_sequence(conn: Connection) -> bool:
    return inspect(conn).has_table("sqlite_sequence")


def describe(counts: Mapping[str, int]) -> str:
    """``message_header 12, message_attempt 30, …``: the tables that hold rows."""
    return ", ".join(f"{name} {n}" for name, n in counts.items() if n) or "no rows"
