"""What each daemon runs, as it reports it (docs/portal.md, "what runs is what is shown").

A daemon writes ``daemon.items`` (the names, comma-separated) and ``daemon.item_states``
(JSON: per item its state, the last attempt's outcome, its servers) at its start, at every
reload and whenever a state changes — its loop compares in memory and writes only then. The
portal, ``encore status`` and ``/api/v1/status`` read them beside the production file: an
item refused by the last reload, or running on no daemon, shows as such whatever the file
says. :func:`announce` sends the console's announcements (restart, reload) to every daemon.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import update

from engine.store.models import daemon
from engine.store.notify import Announcement
from engine.store.sql import SqlStore

# An item's state on one daemon.
READY = "ready"  # running, its adapter started
NOT_READY = "not_ready"  # running, its adapter cannot start yet (a WSDL that is down)
REFUSED = "refused"  # the last reload could not start it (new or changed): see "refused"
FAILED = "failed"  # a restart could not start it again: not running


def write_states(store: SqlStore, daemon_id: str, items: Iterable[str],
                 states: Mapping[str, Mapping[str, Any]], *, file_hash: str | None) -> None:
    """Record what daemon ``daemon_id`` runs: ``items``, each item's state, and the hash
    of the production file it loaded last (:func:`file_hash`)."""
    value = json.dumps({"items": states, "file": file_hash}, sort_keys=True)
    with store.db.tx(durable=False) as conn:  # rewritten by the next change anyway
        conn.execute(update(daemon).where(daemon.c.id == daemon_id).values(
            items=",".join(items), item_states=value))


def read_states(text: str | None) -> tuple[dict[str, dict[str, Any]], str | None]:
    """``daemon.item_states``: (state by item, the file's hash); an unreadable value as
    none."""
    try:
        found = json.loads(text or "{}")
    except ValueError:
        return {}, None
    if not isinstance(found, dict):
        return {}, None
    items = found.get("items")
    states = {str(k): v for k, v in items.items() if isinstance(v, dict)} \
        if isinstance(items, dict) else {}
    file = found.get("file")
    return states, file if isinstance(file, str) else None


def file_hash(*paths: Path | str | None) -> str | None:
    """The SHA-256 of the file at ``paths[0]``; of several files (a production's and its
    defaults file), the SHA-256 of theirs, in order. None: no path, or one not readable."""
    if not paths or None in paths:
        return None
    try:
        digests = [hashlib.sha256(Path(p).read_bytes()).hexdigest()  # type: ignore[arg-type]
                   for p in paths]
    except OSError:
        return None
    return digests[0] if len(digests) == 1 else hashlib.sha256(
        "".join(digests).encode()).hexdigest()


def announce(store: SqlStore, notes: Iterable[Announcement]) -> None:
    """Tell every daemon (and portal) on the database: NOTIFY on PostgreSQL, the doorbells
    of the other processes on SQLite, and this process's own listeners."""
    store.db.announce(list(notes))
