"""An online backup of an SQLite database (docs/backup.md), safe while daemons write to it.

The backup API runs in one step, so the copy is one snapshot; it is written under a temporary
name, integrity-checked, and only then linked into place.
"""
from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

from engine.errors import StoreError
from engine.store.database import SQLITE_BUSY_TIMEOUT, SQLITE_FILE_MODE

__all__ = ["BackupResult", "backup_sqlite"]


@dataclass(frozen=True)
class BackupResult:
    """A finished backup: path, size in bytes, and its integrity check's verdict."""

    path: str
    size: int
    integrity: str


def backup_sqlite(database: str, destination: str) -> BackupResult:
    """Copy the SQLite file ``database`` to the new ``destination`` as one snapshot;
    StoreError, leaving nothing there, on failure."""
    _check_paths(database, destination)
    partial = f"{destination}.partial-{os.getpid()}"
    try:
        _copy(database, partial)
        integrity = _integrity(partial)
        if integrity != "ok":
            raise StoreError(f"the copy of {database} failed its integrity check: {integrity}")
        os.link(partial, destination)  # unlike a rename, never replaces a file made meanwhile
    except FileExistsError as exc:
        raise StoreError(f"{destination} exists; give the backup a new path") from exc
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"the backup of {database} to {destination} failed: {exc}") from exc
    finally:
        for leftover in (partial, *(f"{partial}-{end}" for end in ("journal", "wal", "shm"))):
            if os.path.exists(leftover):
                os.unlink(leftover)
    return BackupResult(destination, os.path.getsize(destination), integrity)


def _check_paths(database: str, destination: str) -> None:
    if not os.path.isfile(database):
        raise StoreError(f"the database {database} does not exist")
    if os.path.exists(destination):
        raise StoreError(f"{destination} exists; give the backup a new path")
    directory = os.path.dirname(os.path.abspath(destination))
    if not os.path.isdir(directory):
        raise StoreError(f"the directory {directory} of the backup does not exist; create it "
                         "first")


def _copy(database: str, partial: str) -> None:
    """The whole of ``database`` into the new file ``partial`` (mode 0600), in one step."""
    fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL, SQLITE_FILE_MODE)
    os.close(fd)
    source = sqlite3.connect(database, timeout=SQLITE_BUSY_TIMEOUT)
    try:
        target = sqlite3.connect(partial)
        try:
            source.backup(target, pages=-1)  # one step: one snapshot
        finally:
            target.close()
    finally:
        source.close()


def _integrity(path: str) -> str:
    """``PRAGMA integrity_check`` of the file at ``path``: ``ok``, or its first complaint."""
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()
