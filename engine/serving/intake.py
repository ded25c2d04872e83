"""Accepting a message for a caller on an event loop and waiting for its end, as the
portal's intake API (``?wait``), its Testing Service and the inbound services do; and the
``Idempotency-Key`` such a caller may send.

A waiting call is woken by the commit that ends its message (:mod:`engine.store.completions`),
in this process or any other; it looks at the database again only every
:data:`~engine.store.completions.SAFETY_POLL` seconds in case an announcement was lost.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException

from engine.process import KEY_PREFIX as PROCESS_KEY_PREFIX
from engine.serving.threads import to_thread
from engine.store.completions import SAFETY_POLL, CompletionHub
from engine.store.hotpath import Outcome
from engine.store.sql import Accepted, SqlStore
from engine.store.statuses import ENDED_STATUSES

MAX_KEY_LENGTH = 200  # characters of an Idempotency-Key (the column's size)


def check_idempotency_key(text: str | None) -> str | None:
    """The ``Idempotency-Key`` header's value, checked (HTTPException 400 if it is bad)."""
    if text is None:
        return None
    if not text.strip() or len(text) > MAX_KEY_LENGTH or not text.isprintable():
        raise HTTPException(400, f"Idempotency-Key: 1 to {MAX_KEY_LENGTH} printable "
                                 "characters")
    if text.startswith(PROCESS_KEY_PREFIX):  # the keys of business processes' own calls
        raise HTTPException(400, f"Idempotency-Key: keys starting with {PROCESS_KEY_PREFIX!r} "
                                 "are Encore's own")
    return text


async def accept_and_wait(store: SqlStore, accept: Callable[[], Accepted], wait: float, *,
                          stopping: threading.Event | None = None
                          ) -> tuple[Accepted, dict[str, Any] | None]:
    """Run ``accept`` (an :func:`~engine.client.accept_message` with ``waited=True``) on a
    thread, then wait up to ``wait`` seconds for the message's end, woken by the commit
    that ends it: (the accepted message, its outcome — None if it had not ended in time, or
    ``stopping`` was set first). The intake API's ``?wait``, the Testing Service and the
    inbound services all wait so.

    The watch begins (here, on the event loop, once the message exists) before the first
    look, so no end is missed. That look is skipped for a message the call created after
    this process was already hearing every end — the hub then knows whether it ended
    (:meth:`CompletionHub.ended_lately`) — and a success committed here after the watch
    began comes with its response (:meth:`CompletionHub.kept`): no read at all."""
    hub = store.completions
    if not hub.hearing:  # the first wait: it may wait for a listener to connect
        await to_thread(hub.start_hearing)
    heard = hub.hearing  # before the commit: then every end of the message is heard here
    accepted = await to_thread(accept)
    woken = _Wake(asyncio.get_running_loop())
    with hub.watching(accepted.id, woken.set):
        outcome = None
        if not (accepted.created and heard and not hub.ended_lately(accepted.id)):
            outcome = _completed_here(hub, accepted)  # ended already, here: no read
            if outcome is None:
                outcome = await to_thread(outcome_if_ended, store, accepted.id)
        if outcome is None:
            outcome = await _ended(store, accepted, wait, woken, stopping)
    return accepted, outcome


def _completed_here(hub: CompletionHub, accepted: Accepted) -> dict[str, Any] | None:
    """The outcome of ``accepted`` if it completed in this process lately (its response
    kept by the hub), else None: read it."""
    kept = hub.kept(accepted.id)
    if kept is None:
        return None
    return {"id": accepted.id, "session_id": accepted.session_id, "status": "Completed",
            "response": _decoded(kept[1]), "error": None}


class _Wake:
    """A wake-up for a waiter on the event loop, set from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future: asyncio.Future[None] = loop.create_future()

    def set(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._settle)
        except RuntimeError:  # the loop closed: nobody waits any more
            pass

    def _settle(self) -> None:
        if not self._future.done():
            self._future.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until set (since the last wait), or ``timeout`` seconds."""
        if not self._future.done():
            timer = self._loop.call_later(timeout, self._settle)
            try:
                await self._future
            finally:
                timer.cancel()
        self._future = self._loop.create_future()  # before the look: a later set counts


async def _ended(store: SqlStore, accepted: Accepted, wait: float, woken: _Wake,
                 stopping: threading.Event | None) -> dict[str, Any] | None:
    """The outcome of the message once it has finished (or is suspended), woken by
    ``woken``; None after ``wait`` seconds, or once ``stopping`` is set."""
    hub = store.completions
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        if stopping is not None and stopping.is_set():
            return None
        await woken.wait(min(left, SAFETY_POLL))
        outcome = _completed_here(hub, accepted)  # its response came with the announcement
        if outcome is None:
            outcome = await to_thread(outcome_if_ended, store, accepted.id)
        if outcome is not None:
            return outcome
    return None


def outcome_if_ended(store: SqlStore, message_id: int) -> dict[str, Any] | None:
    found = store.get_outcome(message_id)  # the message and its response: one read
    return None if found is None or found.row.status not in ENDED_STATUSES else _outcome(found)


def _outcome(found: Outcome) -> dict[str, Any]:
    row = found.row
    body = _decoded(found.response_body) if found.response else None
    return {"id": row.id, "session_id": row.session_id, "status": row.status,
            "response": body, "error": row.error_text}


def _decoded(body: str | None) -> Any:
    """A response body as the caller sees it: its JSON value (None: none, or empty)."""
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body
