"""Accepting a message for a caller on an event loop and waiting for its end (the intake
API's ``?wait``, the Testing Service, the inbound services); the ``Idempotency-Key`` check.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException

from engine.process import KEY_PREFIX as PROCESS_KEY_PREFIX
from engine.serving.threads import to_thread
from engine.store.completions import Kept
from engine.store.hotpath import Outcome
from engine.store.sql import Accepted, SqlStore
from engine.store.statuses import ENDED_STATUSES, Status

MAX_KEY_LENGTH = 200  # the column's size


def check_idempotency_key(text: str | None) -> str | None:
    """The ``Idempotency-Key`` header's value, checked (HTTPException 400 if it is bad)."""
    if text is None:
        return None
    if not text.strip() or len(text) > MAX_KEY_LENGTH or not text.isprintable():
        raise HTTPException(400, f"Idempotency-Key: 1 to {MAX_KEY_LENGTH} printable "
                                 "characters")
    if text.startswith(PROCESS_KEY_PREFIX):
        raise HTTPException(400, f"Idempotency-Key: keys starting with {PROCESS_KEY_PREFIX!r} "
                                 "are Encore's own")
    return text


async def accept_and_wait(store: SqlStore, accept: Callable[[], Accepted], wait: float, *,
                          stopping: threading.Event | None = None
                          ) -> tuple[Accepted, dict[str, Any] | None]:
    """Run ``accept`` (``waited=True``) on a thread, then wait up to ``wait`` seconds for
    the message's end: (the accepted message, its outcome or None)."""
    hub = store.completions
    if not hub.hearing:
        await to_thread(hub.start_hearing)
    heard = hub.hearing  # before the commit: then every end of the message is heard here
    accepted = await to_thread(accept)
    outcome = await hub.wait_async(
        accepted.id, lambda: outcome_if_ended(store, accepted.id), wait, hop=to_thread,
        kept=lambda kept: _completed_here(accepted, kept), fresh=accepted.created and heard,
        stop=stopping)
    return accepted, outcome


def _completed_here(accepted: Accepted, kept: Kept) -> dict[str, Any]:
    """The outcome of ``accepted``, completed here with the response ``kept``."""
    return {"id": accepted.id, "session_id": accepted.session_id, "status": Status.COMPLETED,
            "response": _decoded(kept[1]), "error": None}


def outcome_if_ended(store: SqlStore, message_id: int) -> dict[str, Any] | None:
    found = store.get_outcome(message_id)
    return None if found is None or found.row.status not in ENDED_STATUSES else _outcome(found)


def _outcome(found: Outcome) -> dict[str, Any]:
    row = found.row
    body = _decoded(found.response_body) if found.response else None
    return {"id": row.id, "session_id": row.session_id, "status": row.status,
            "response": body, "error": row.error_text}


def _decoded(body: str | None) -> Any:
    """A response body's JSON value (None if empty)."""
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body
