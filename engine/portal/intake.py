"""Intake through the API: ``POST /api/v1/messages/{target}`` (DESIGN.md §10).

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
import time
from contextlib import ExitStack
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from engine.client import TERMINAL, accept_message, decode_body
from engine.errors import MessageError
from engine.portal.api import api_user, cached_api_user, reply
from engine.portal.app import portal_of
from engine.process import KEY_PREFIX as PROCESS_KEY_PREFIX
from engine.store.completions import SAFETY_POLL
from engine.store.sql import Accepted, Outcome

MAX_BODY_BYTES = 1024 * 1024  # bytes of one intake body
MAX_WAIT = 300.0  # seconds ?wait= may ask for
MAX_KEY_LENGTH = 200  # characters of an Idempotency-Key (the column's size)


def routes() -> list[BaseRoute]:
    return [Route("/api/v1/messages/{target}", intake, methods=["POST"])]


async def intake(request: Request) -> Response:
    who = cached_api_user(request, "sender") or await run_in_threadpool(api_user, request,
                                                                        "sender")
    portal = portal_of(request)
    target = request.path_params["target"]
    if target not in portal.items:
        raise HTTPException(404, f"unknown target {target!r}: no such item in the production")
    wait = _wait(request.query_params.get("wait"))
    key = _idempotency_key(request.headers.get("idempotency-key"))
    text = await _body_text(request)
    if wait is None:  # decoded, checked and committed in one hop to the thread pool
        accepted: Accepted = await run_in_threadpool(
            lambda: accept_message(portal.store, portal.production, target,
                                   decode_body(text, where="request"),
                                   source=f"api:{who.name}", idempotency_key=key,
                                   same_body=True))
        response = reply({"id": accepted.id, "session_id": accepted.session_id}, 202)
        if not accepted.created:
            response.headers["idempotent-replayed"] = "true"
        return response
    with ExitStack() as watch:
        watch.enter_context(portal.waiters.slot())  # 503 past the cap: nothing created
        woken = asyncio.Event()
        loop = asyncio.get_running_loop()

        def take_in() -> tuple[Accepted, dict[str, Any] | None]:
            """Accept, then watch for its end, then look once (an end committed before the
            watch began is seen by that look) — unless the message is new and this process
            heard every end since before its accept: then the hub knows whether it ended."""
            hub = portal.store.completions
            heard = hub.hearing
            accepted = accept_message(portal.store, portal.production, target,
                                      decode_body(text, where="request"),
                                      source=f"api:{who.name}", idempotency_key=key,
                                      waited=True, same_body=True)
            watch.enter_context(hub.watching(
                accepted.id, lambda: loop.call_soon_threadsafe(woken.set)))
            if accepted.created and heard and not hub.ended_lately(accepted.id):
                return accepted, None
            return accepted, _outcome_if_ended(portal.store, accepted.id)

        accepted, outcome = await run_in_threadpool(take_in)
        if outcome is None:
            outcome = await _ended(portal.store, accepted.id, wait, woken)
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


def _idempotency_key(text: str | None) -> str | None:
    if text is None:
        return None
    if not text.strip() or len(text) > MAX_KEY_LENGTH or not text.isprintable():
        raise HTTPException(400, f"Idempotency-Key: 1 to {MAX_KEY_LENGTH} printable "
                                 "characters")
    if text.startswith(PROCESS_KEY_PREFIX):  # the keys of business processes' own calls
        raise HTTPException(400, f"Idempotency-Key: keys starting with {PROCESS_KEY_PREFIX!r} "
                                 "are Encore's own")
    return text


async def _ended(store: Any, message_id: int, wait: float, woken: asyncio.Event
                 ) -> dict[str, Any] | None:
    """The outcome of the message once it has finished (or is suspended), woken by
    ``woken``; None after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        try:
            await asyncio.wait_for(woken.wait(), min(left, SAFETY_POLL))
        except asyncio.TimeoutError:
            pass
        woken.clear()  # before the look: an end announced during it wakes the next wait
        outcome = await run_in_threadpool(_outcome_if_ended, store, message_id)
        if outcome is not None:
            return outcome
    return None


def _outcome_if_ended(store: Any, message_id: int) -> dict[str, Any] | None:
    found = store.get_outcome(message_id)  # the message and its response: one read
    return None if found is None or found.row.status not in TERMINAL else _outcome(found)


def _outcome(found: Outcome) -> dict[str, Any]:
    row, body = found.row, None
    if found.response and found.response_body:
        try:
            body = json.loads(found.response_body)
        except ValueError:
            body = found.response_body
    return {"id": row.id, "session_id": row.session_id, "status": row.status,
            "response": body, "error": row.error_text}
