"""Intake through the API: ``POST /api/v1/messages/{target}`` (DESIGN.md §10).

A token of role ``sender`` or higher; the body is checked exactly as ``encore send`` checks
it (:func:`engine.client.accept_message`) and committed before the answer,
``202 {"id", "session_id"}``. An ``Idempotency-Key`` header makes a retry of the same call
return the first message and create nothing — decided by the database's unique index, so it
holds for racing calls on any number of portals. ``?wait=S`` waits up to S seconds for the
message to finish: ``200`` with its status and response, or ``504`` (the message goes on).
Refusals create nothing: ``400`` (not JSON, not UTF-8, a body that does not fit the target's
message class, a bad key or wait), ``404`` (no such target), ``413`` (over
:data:`MAX_BODY_BYTES`).
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from engine.client import TERMINAL, accept_message, decode_body
from engine.errors import MessageError
from engine.portal.api import api_user, reply
from engine.portal.app import portal_of
from engine.process import KEY_PREFIX as PROCESS_KEY_PREFIX
from engine.store.sql import Accepted, MessageRow

MAX_BODY_BYTES = 1024 * 1024  # bytes of one intake body
MAX_WAIT = 300.0  # seconds ?wait= may ask for
WAIT_POLL = 0.05  # seconds between looks at a waited-for message
MAX_KEY_LENGTH = 200  # characters of an Idempotency-Key (the column's size)


def routes() -> list[BaseRoute]:
    return [Route("/api/v1/messages/{target}", intake, methods=["POST"])]


async def intake(request: Request) -> Response:
    who = await run_in_threadpool(api_user, request, "sender")
    portal = portal_of(request)
    target = request.path_params["target"]
    if target not in portal.items:
        raise HTTPException(404, f"unknown target {target!r}: no such item in the production")
    wait = _wait(request.query_params.get("wait"))
    key = _idempotency_key(request.headers.get("idempotency-key"))
    body = decode_body(await _body_text(request), where="request")
    accepted: Accepted = await run_in_threadpool(
        lambda: accept_message(portal.store, portal.production, target, body,
                               source=f"api:{who.name}", idempotency_key=key))
    headers = {} if accepted.created else {"idempotent-replayed": "true"}
    if wait is None:
        response = reply({"id": accepted.id, "session_id": accepted.session_id}, 202)
        response.headers.update(headers)
        return response
    row = await _finished(portal.store, accepted.id, wait)
    if row is None:
        return reply({"error": f"message {accepted.id} not finished after {wait:g} s; it "
                               "goes on", "id": accepted.id,
                      "session_id": accepted.session_id}, 504)
    return reply(await run_in_threadpool(_outcome, portal.store, row))


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


async def _finished(store: Any, message_id: int, wait: float) -> MessageRow | None:
    """The message once it has finished (or is suspended); None after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        row = await run_in_threadpool(store.get_message, message_id)
        if row is not None and row.status in TERMINAL:
            return row
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(min(WAIT_POLL, max(deadline - time.monotonic(), 0)))


def _outcome(store: Any, row: MessageRow) -> dict[str, Any]:
    response = store.get_message(row.corresponding_id) if row.corresponding_id else None
    body = None
    if response is not None and response.body:
        try:
            body = json.loads(response.body)
        except ValueError:
            body = response.body
    return {"id": row.id, "session_id": row.session_id, "status": row.status,
            "response": body, "error": row.error_text}
