"""Intake through the API: ``POST /api/v1/messages/{target}`` (docs/processes.md).

The body is checked as ``encore send`` checks it and committed before the answer; an
``Idempotency-Key`` replay is decided by the database's unique index, so it holds for racing
calls on any number of portals.
"""
from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from engine.client import accept_message, decode_body
from engine.errors import MessageError
from engine.portal.api import api_user, cached_api_user, reply
from engine.portal.context import portal_of
from engine.serving.intake import accept_and_wait, check_idempotency_key
from engine.serving.threads import to_thread
from engine.store.sql import Accepted

MAX_BODY_BYTES = 1024 * 1024  # bytes of one intake body
MAX_WAIT = 300.0  # seconds ?wait= may ask for


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
