"""What each daemon runs, as it reports it (docs/portal.md, "what runs is what is shown"):
``daemon.items`` and ``daemon.item_states``, written at start, reload and each state change,
read beside the production file by the portal and ``encore status``."""
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

READY = "ready"  # running, its adapter started
NOT_READY = "not_ready"  # its adapter cannot start yet
REFUSED = "refused"  # the last reload could not start it
FAILED = "failed"  # a restart could not start it again


def write_states(store: SqlStore, daemon_id: str, items: Iterable[str],
                 states: Mapping[str, Mapping[str, Any]], *, file_hash: str | None) -> None:
    """Record what daemon ``daemon_id`` runs, each item's state and its file's hash."""
    value = json.dumps({"items": states, "file": file_hash}, sort_keys=True)
    with store.db.tx(durable=False) as conn:
        conn.execute(update(daemon).where(daemon.c.id == daemon_id).values(
            items=",".join(items), item_states=value))


def read_states(text: str | None) -> tuple[dict[str, dict[str, Any]], str | None]:
    """``daemon.item_states``: (state by item, the file's hash); unreadable as none."""
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
    """The SHA-256 of the file at ``paths[0]`` (of several: of their digests, in order);
    None if unreadable."""
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
    """Tell every daemon and portal on the database."""
    store.db.announce(list(notes))
