"""The JSON API under ``/api/v1`` (docs/portal.md): the portal's data and actions for scripts,
behind a bearer token."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from engine.errors import MessageNotFound
from engine.portal import actions, export, filters
from engine.portal.context import portal_of
from engine.portal.status import production_view
from engine.serving.auth import NotAuthenticated, Principal
from engine.store import viewer
from engine.store.rows import AttemptRow


def routes() -> list[BaseRoute]:
    return [
        Route("/api/v1/status", status, methods=["GET"]),
        Route("/api/v1/messages", messages, methods=["GET"]),
        Route("/api/v1/messages/{message_id:int}", message, methods=["GET"]),
        Route("/api/v1/messages/{message_id:int}/{action}", message_action, methods=["POST"]),
        Route("/api/v1/events", events, methods=["GET"]),
        Route("/api/v1/items/{name}/{action}", item_action, methods=["POST"]),
    ]


def api_user(request: Request, role: str) -> Principal:
    """The token's holder, with at least ``role``; NotAuthenticated or Forbidden."""
    who = portal_of(request).auth.bearer(request.headers.get("authorization"))
    if who is None:
        raise NotAuthenticated("a valid API token is needed: Authorization: Bearer TOKEN")
    who.require(role)
    return who


def cached_api_user(request: Request, role: str) -> Principal | None:
    """:func:`api_user` from the token cache alone, without reading the database (callable
    from the event loop); None: not in the cache, ask :func:`api_user`."""
    who = portal_of(request).auth.cached_bearer(request.headers.get("authorization"))
    if who is not None:
        who.require(role)
    return who


def reply(content: Any, status_code: int = 200) -> JSONResponse:
    return JSONResponse(jsonable(content), status_code=status_code)


def jsonable(value: Any) -> Any:
    """``value`` with datetimes as ISO text and attempt rows as objects."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, AttemptRow):
        return jsonable(vars(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


# -- reading -----------------------------------------------------------------------------
def status(request: Request) -> Response:
    api_user(request, "viewer")
    portal = portal_of(request)
    view = production_view(portal)
    return reply({"production": portal.production.name, **view})


def messages(request: Request) -> Response:
    api_user(request, "viewer")
    params = request.query_params
    if params.get("format"):  # an export: every matching row, streamed (export.py)
        return export.messages_export(request, params["format"])
    portal = portal_of(request)
    flt = filters.message_filter(params, export.declared_properties(portal.production))
    page = viewer.messages_page(portal.store, flt, **filters.cursor(params))
    return reply({"messages": page.rows, "older": page.older, "newer": page.newer})


def message(request: Request) -> Response:
    api_user(request, "viewer")
    store = portal_of(request).store
    message_id = request.path_params["message_id"]
    row = viewer.message(store, message_id)
    if row is None:
        raise MessageNotFound(f"message {message_id} does not exist")
    related = viewer.message(store, row["corresponding_id"]) if row["corresponding_id"] else None
    return reply({"message": _with_body(row),
                  "response" if row["kind"] == "request" else "request":
                      _with_body(related) if related else None,
                  "attempts": viewer.attempts_of(store, [message_id])[message_id],
                  "events": viewer.events_of(store, [message_id])})


def _with_body(row: dict[str, Any]) -> dict[str, Any]:
    """The row without claim internals, its body decoded when it is JSON."""
    shown = {k: v for k, v in row.items() if k not in ("claim_token", "trace_context")}
    try:
        shown["body"] = json.loads(row["body"]) if row["body"] is not None else None
    except ValueError:
        pass
    return shown


def events(request: Request) -> Response:
    api_user(request, "viewer")
    params = request.query_params
    if params.get("format"):
        return export.events_export(request, params["format"])
    page = viewer.events_page(portal_of(request).store, filters.event_filter(params),
                              **filters.cursor(params))
    return reply({"events": page.rows, "older": page.older, "newer": page.newer})


# -- actions -----------------------------------------------------------------------------
async def message_action(request: Request) -> Response:
    who = await run_in_threadpool(api_user, request, "operator")
    portal = portal_of(request)
    message_id, action = request.path_params["message_id"], request.path_params["action"]
    if action not in actions.MESSAGE_ACTIONS:
        raise HTTPException(404, f"no action {action!r}; expected one of "
                                 f"{', '.join(actions.MESSAGE_ACTIONS)}")
    shown = await run_in_threadpool(actions.act_on_message, portal.store, portal.items, who,
                                    action, message_id)
    row = await run_in_threadpool(portal.store.get_message, message_id)
    result: dict[str, Any] = {"id": message_id, "status": row.status if row else None}
    if action == "resend":
        result["resent_as"] = shown
    return reply(result)


async def item_action(request: Request) -> Response:
    who = await run_in_threadpool(api_user, request, "operator")
    portal = portal_of(request)
    name, action = request.path_params["name"], request.path_params["action"]
    if action not in ("enable", "disable"):
        raise HTTPException(404, f"no action {action!r}; expected enable or disable")
    await run_in_threadpool(actions.set_item_enabled, portal.store, portal.items, who, name,
                            action == "enable")
    return reply({"item": name, "enabled": action == "enable"})
