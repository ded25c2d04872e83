"""Intake through the API: ``POST /api/v1/messages/{target}`` (docs/processes.md).

A token of role ``sender`` or higher; the body is checked exactly as ``encore send`` checks
it (:func:`engine.client.accept_message`) and committed before the answer,
``202 {"id", "session_id"}``. An ``Idempotency-Key`` header makes a retry of the same call
return the first message and create nothing (``Idempotent-Replayed: true``, with or without
``?wait``) — decided by the database's unique index on (target, caller, key), so it holds
for racing calls on any number of portals; the caller is the token's holder, so another
holder's key is another message, and the same key again with another body is refused with
``422``. ``?wait=S`` waits up to S seconds for the message to finish: ``200`` with its status
and response, or ``504`` (the message goes on); at most ``[portal] max_waiters`` calls wait at
once, the next is refused with ``503`` before anything is created. Refusals create nothing:
``400`` (not JSON, not UTF-8, a lone surrogate, a body that does not fit the target's
message class, a bad key or wait), ``404`` (no such target), ``413`` (over
:data:`MAX_BODY_BYTES`).

A ``?wait`` call is woken by the commit that ends its message (:mod:`engine.store.completions`),
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
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from engine.client import TERMINAL, accept_message, decode_body
from engine.errors import MessageError
from engine.portal.api import api_user, cached_api_user, reply
from engine.portal.context import portal_of
from engine.portal.threads import to_thread
from engine.process import KEY_PREFIX as PROCESS_KEY_PREFIX
from engine.store.completions import SAFETY_POLL, CompletionHub
from engine.store.hotpath import Outcome
from engine.store.sql import Accepted, SqlStore
from engine.store.statuses import Status

MAX_BODY_BYTES = 1024 * 1024  # bytes of one intake body
MAX_WAIT = 300.0  # seconds ?wait= may ask for
MAX_KEY_LENGTH = 200  # characters of an Idempotency-Key (the column's size)


def routes() -> list[BaseRoute]:
    return [Route("/api/v1/messages/{target}", intake, methods=["POST"])]


async def intake(request: Request) -> Response:
    who = cached_api_user(request, "sender")
    if who is None:
        who = await to_thread(api_user, request, "sender")
    portal = portal_of(request)
    target = request.path_params["target"]
    if not portal.has_item(target):
        raise HTTPException(404, f"unknown target {target!r}: no such item in the production")
    wait = _wait(request.query_params.get("wait")) if request.scope["query_string"] else None
    key = check_idempotency_key(request.headers.get("idempotency-key"))
    text = await _body_text(request)
    if wait is None:  # decoded, checked and committed in one hop to a thread
        accepted: Accepted = await to_thread(
            lambda: accept_message(portal.store, portal.production, target,
                                   decode_body(text, where="request"),
                                   source=f"api:{who.name}", idempotency_key=key,
                                   same_body=True))
        response = JSONResponse({"id": accepted.id, "session_id": accepted.session_id}, 202)
        if not accepted.created:
            response.headers["idempotent-replayed"] = "true"
        return response
    with portal.waiters.slot():  # 503 past the cap: nothing created
        accepted, outcome = await accept_and_wait(
            portal.store, lambda: accept_message(
                portal.store, portal.production, target, decode_body(text, where="request"),
                source=f"api:{who.name}", idempotency_key=key, waited=True, same_body=True),
            wait)
    if outcome is None:
        response = reply({"error": f"message {accepted.id} not finished after {wait:g} s; "
                                   "it goes on", "id": accepted.id,
                          "session_id": accepted.session_id}, 504)
    else:
        response = reply(outcome)
    if not accepted.created:
        response.headers["idempotent-replayed"] = "true"
    return response


async def _body_text(request: Request) -> str:
    """The body as text, refused (413) past :data:`MAX_BODY_BYTES` before it is all read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HTTPException(413, f"the body is over {MAX_BODY_BYTES} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise HTTPException(413, f"the body is over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MessageError(f"request: body is not UTF-8 text: {exc}") from exc


def _wait(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT:
        raise HTTPException(400, f"wait: {text!r} is not a number of seconds from 0 to "
                                 f"{MAX_WAIT:g}")
    return seconds


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
    return {"id": accepted.id, "session_id": accepted.session_id, "status": Status.COMPLETED,
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
    return None if found is None or found.row.status not in TERMINAL else _outcome(found)


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
