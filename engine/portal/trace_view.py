"""A session gathered for the Visual Trace page: its messages, attempts, events and SVG,
a page of at most :data:`TRACE_PAGE` messages at a time (a session of thousands of
messages — a process fanning out — stays readable and cheap to draw)."""
from __future__ import annotations

from typing import Any

from engine.errors import NotFound
from engine.portal.trace_svg import render_trace
from engine.store import viewer
from engine.store.inbound import calls_of
from engine.store.sql import SqlStore

TRACE_PAGE = 100  # messages drawn on one page of the Visual Trace


def session_trace(store: SqlStore, session_id: int, page: int = 1) -> dict[str, Any]:
    """``{"session_id", "messages", "attempts", "events", "svg", "page", "pages",
    "total"}`` for page ``page`` (from 1) of the session; NotFound if the session has
    no message, or no such page."""
    total = viewer.count_session(store, session_id)
    if not total:
        raise NotFound(f"session {session_id} does not exist")
    pages = (total + TRACE_PAGE - 1) // TRACE_PAGE
    if not 1 <= page <= pages:
        raise NotFound(f"session {session_id} has {pages} page(s); page {page} does "
                       "not exist")
    messages = viewer.session_messages(store, session_id, offset=(page - 1) * TRACE_PAGE,
                                       limit=TRACE_PAGE)
    ids = [m["id"] for m in messages]
    attempts = viewer.attempts_of(store, ids)
    events = viewer.events_of(store, ids)
    calls = calls_of(store, ids)
    return {"session_id": session_id, "messages": messages, "attempts": attempts,
            "events": events, "svg": render_trace(messages, attempts, events, calls),
            "page": page, "pages": pages, "total": total,
            "first": (page - 1) * TRACE_PAGE + 1, "last": (page - 1) * TRACE_PAGE + len(ids)}
