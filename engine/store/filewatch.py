"""The SQLite database file, watched (docs/administration.md, "The database file").

A daemon whose file was deleted, replaced or moved writes into a file nobody reads.
:class:`DatabaseFileWatch` compares the device and inode at the path with the opened file's at
every heartbeat (and each new connection); the first difference ends the daemon.
:func:`holders_of_lost_file` finds processes still holding such a file.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import event

from engine.errors import StoreError
from engine.store.database import sqlite_file
from engine.store.sql import SqlStore

log = logging.getLogger(__name__)

Identity = tuple[int, int]  # (st_dev, st_ino)


class DatabaseFileLost(StoreError):
    """The SQLite file a daemon opened is no longer at its path (deleted, replaced, moved)."""


def file_identity(path: str | os.PathLike[str]) -> Identity | None:
    """(device, inode) of the file at ``path``; None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class DatabaseFileWatch:
    """Whether the SQLite file of ``store`` is still the one at its path (always, for
    PostgreSQL or memory)."""

    def __init__(self, store: SqlStore) -> None:
        name = None if store.is_postgres else sqlite_file(store.url)
        self.path = None if name is None else str(Path(name).resolve())
        self.identity = None if self.path is None else file_identity(self.path)
        self.lost: str | None = None
        self._reported = False
        if self.path is not None:
            _listen_first(store.engine, "do_connect", self._connect)

    def check(self, report: Callable[[str], Any], stop: Callable[[], Any]) -> bool:
        """True while the file at the path is the one opened; the first time not, calls
        ``report`` and ``stop``, and False from then on."""
        if self.path is None or (self.lost is None and self._still_there()):
            return True
        if not self._reported:
            self._reported = True
            log.error("%s", self.lost)
            try:
                report(str(self.lost))
            except Exception as exc:  # the stop matters, the event may not fit
                log.error("the event could not be written: %s", exc)
            stop()
        return False

    def raise_if_lost(self) -> None:
        """:class:`DatabaseFileLost` once the file was found gone."""
        if self.lost is not None:
            raise DatabaseFileLost(self.lost)

    def _still_there(self) -> bool:
        """Whether the path holds the file first seen there; else :attr:`lost` says why."""
        assert self.path is not None
        now = file_identity(self.path)
        if self.identity is None:
            self.identity = now
            return True
        if now == self.identity:
            return True
        what = "deleted or moved" if now is None else "replaced by another file"
        self.lost = (f"the SQLite database file {self.path} was {what} while this daemon "
                     "ran; it stopped rather than write on into a file that is no longer "
                     "there (its work since then is in that file only). Put the file back, "
                     "or run encore db upgrade for a new one, then start the daemon again")
        return False

    def _connect(self, dialect: Any, _record: Any, cargs: list[Any],
                 cparams: dict[str, Any]) -> Any:
        """Each new connection, once the file is known: opened without creating a file,
        then the path looked at again. None until a file has been seen."""
        if self.lost is not None:
            raise DatabaseFileLost(self.lost)
        if self.identity is None:
            return None
        params = {k: v for k, v in cparams.items() if k != "uri"}
        try:
            conn = dialect.loaded_dbapi.connect(f"file:{quote(str(self.path))}?mode=rw",
                                                *cargs[1:], uri=True, **params)
        except Exception:
            if not self._still_there():
                raise DatabaseFileLost(str(self.lost)) from None
            raise
        if not self._still_there():
            conn.close()
            raise DatabaseFileLost(str(self.lost))
        return conn


def _listen_first(engine: Any, name: str, fn: Callable[..., Any]) -> None:
    """Listen to the engine's event ``name`` before its other listeners."""
    others = list(getattr(engine.dialect.dispatch, name))
    for other in others:
        event.remove(engine, name, other)
    event.listen(engine, name, fn)
    for other in others:
        event.listen(engine, name, other)


def holders_of_lost_file(path: str | os.PathLike[str]) -> list[int]:
    """PIDs of other processes that hold open a file once at ``path`` and since deleted or
    replaced there (via /proc; empty where there is none)."""
    gone = f"{Path(path).resolve()} (deleted)"
    found = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid != os.getpid() and _holds(pid, gone):
            found.append(pid)
    return found


def _holds(pid: int, target: str) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def lost_file_warning(url: str) -> str | None:
    """What ``encore status`` and ``db upgrade`` say when processes hold a lost SQLite file
    of ``url``; None when none does."""
    name = sqlite_file(url) if url.startswith("sqlite") else None
    if name is None:
        return None
    pids = holders_of_lost_file(name)
    if not pids:
        return None
    which = ", ".join(map(str, pids))
    return (f"warning: process {which} still has open a database file that was at "
            f"{Path(name).resolve()} and has been deleted or replaced: a daemon there writes "
            "into a file no other command sees, and its work is lost when it stops (a daemon "
            "stops by itself at its next heartbeat)")
