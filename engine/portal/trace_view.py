"""A session gathered for the Visual Trace page: its messages, attempts, events and SVG."""
from __future__ import annotations

from typing import Any

from engine.errors import OperatorError
from engine.portal.trace_svg import render_trace
from engine.store import viewer
from engine.store.inbound import calls_of
from engine.store.sql import SqlStore


def session_trace(store: SqlStore, session_id: int) -> dict[str, Any]:
    """``{"session_id", "messages", "attempts", "events", "svg"}``; OperatorError if the
    session has no message."""
    messages = viewer.session_messages(store, session_id)
    if not messages:
        raise OperatorError(f"session {session_id} does not exist")
    ids = [m["id"] for m in messages]
    attempts = viewer.attempts_of(store, ids)
    events = viewer.events_of(store, ids)
    calls = calls_of(store, ids)
    return {"session_id": session_id, "messages": messages, "attempts": attempts,
            "events": events, "svg": render_trace(messages, attempts, events, calls)}
