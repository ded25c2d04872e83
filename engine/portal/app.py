"""The portal's ASGI application: :func:`create_app` over a store and a production.

Route modules never import this one (they reach the shared context through
:mod:`engine.portal.context`); refusals become responses here, JSON under ``/api/``.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.client import IdempotencyConflict
from engine.config.production import ProductionConfig
from engine.errors import MessageError, NotFound, OperatorError, StoreError
from engine.portal import admin, api, export, intake, items, pages, queues, searches
from engine.portal.auth import PortalAuthenticator, portal_secret
from engine.portal.context import Portal, Waiters, portal_of
from engine.portal.filters import FilterError
from engine.portal.watch import ProductionFollower
from engine.serving.auth import AuthError, Forbidden, LoginThrottled, NotAuthenticated
from engine.serving.client_gone import on_client_gone
from engine.store.sql import SqlStore
from engine.store.statuses import Status
from engine.store.viewer import SearchTimedOut, SearchTooComplex

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def create_app(store: SqlStore, production: ProductionConfig, *, secret: str | None = None,
               tls: bool = False, env: Mapping[str, str] | None = None,
               max_waiters: int | None = None, follow_file: bool = False) -> Starlette:
    """The portal and API for ``production`` on ``store``. ``secret`` signs the session
    cookies (default: ``$ENCORE_PORTAL_SECRET``, else random for this process); ``tls``
    marks the session cookie Secure; ``max_waiters``: intake calls that may wait at once
    (default: ``[portal] max_waiters``'s). The portal follows the production file when a
    daemon announces a reload, and — ``follow_file``, a standalone portal — when the file
    changes (:mod:`engine.portal.watch`)."""
    env = os.environ if env is None else env
    auth = PortalAuthenticator(store, secret or portal_secret(env))
    portal = Portal(store, production, auth, _templates(), tls=tls)
    if max_waiters is not None:
        portal.waiters = Waiters(max_waiters)
    # the intake first: matched on every intake call, it is the portal's hottest path (no
    # other route answers a POST to /api/v1/messages/{name})
    routes = [*intake.routes(), *items.routes(),
              *queues.routes(),  # before pages': /items/{name}/restart
              *pages.routes(), *api.routes(),
              *export.routes(), *searches.routes(), *admin.routes(),
              Mount("/static", StaticFiles(directory=HERE / "static"), name="static")]
    app = Starlette(routes=routes, middleware=[Middleware(SecurityHeaders)],
                    exception_handlers={Exception: _server_error, HTTPException: _http_error,
                                        AuthError: _auth_error, FilterError: _bad_request,
                                        MessageError: _bad_request, OperatorError: _conflict,
                                        IdempotencyConflict: _key_reused,
                                        StoreError: _unavailable,
                                        ClientDisconnect: on_client_gone("portal"),
                                        SearchTooComplex: _bad_request,
                                        SearchTimedOut: _search_timeout})
    app.state.portal = portal
    if production.path is not None:
        app.state.follower = ProductionFollower(portal, env, poll_file=follow_file)
        app.state.follower.start()
    return app


# -- templates ---------------------------------------------------------------------------
def _templates() -> Jinja2Templates:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                     autoescape=True)
    environment.filters.update(ts=_timestamp, pretty=_pretty_json, short=_short)
    environment.globals["Status"] = Status
    return Jinja2Templates(env=environment)


def _timestamp(value: datetime | None) -> Markup | str:
    """A time as UTC text in a ``<time>`` element; a user who reads local time has it
    converted by the browser (static/timezone.js), every page saying which it shows."""
    if not value:
        return "–"
    value = value.astimezone(UTC)
    text = value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return Markup('<time datetime="{}">{}</time>').format(
        value.isoformat(timespec="milliseconds").replace("+00:00", "Z"), text)


def _pretty_json(text: str | None) -> str:
    if text is None:
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def _short(text: str | None, limit: int = 120) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- refusals ----------------------------------------------------------------------------
def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def error_response(request: Request, status: int, text: str,
                   headers: Mapping[str, str] | None = None) -> Response:
    """``{"error": text}`` for the API, the error page for a person (a lone surrogate in
    ``text``, which UTF-8 cannot carry, as its escape)."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if _is_api(request):
        return JSONResponse({"error": text}, status_code=status, headers=headers)
    portal = portal_of(request)
    user = getattr(request.state, "user", None)
    response = portal.render(request, "error.html", {"status": status, "text": text},
                             user=user, status_code=status)
    response.headers.update(headers or {})
    return response


async def _auth_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, NotAuthenticated):
        if _is_api(request):
            return error_response(request, 401, str(exc), {"www-authenticate": "Bearer"})
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
    if isinstance(exc, LoginThrottled):
        return error_response(request, 429, str(exc),
                              {"retry-after": str(int(exc.retry_after) + 1)})
    status = 403 if isinstance(exc, Forbidden) else 400
    return error_response(request, status, str(exc))


async def _bad_request(request: Request, exc: Exception) -> Response:
    return error_response(request, 400, str(exc))


async def _key_reused(request: Request, exc: Exception) -> Response:
    return error_response(request, 422, str(exc))


async def _conflict(request: Request, exc: Exception) -> Response:
    """A refused action: 404 when what it names does not exist (:class:`NotFound`), else
    409, the action does not fit what it names."""
    status = 404 if isinstance(exc, NotFound) else 409
    return error_response(request, status, str(exc))


async def _unavailable(request: Request, exc: Exception) -> Response:
    log.error("portal: %s", exc)
    return error_response(request, 503, "the database is unavailable; try again")


async def _search_timeout(request: Request, exc: Exception) -> Response:
    """A Message Viewer query stopped by its statement timeout: the database is fine, the
    search reads too much (engine.store.viewer)."""
    log.warning("portal: %s (%s)", exc, request.url.path)
    return error_response(request, 503, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(request, exc.status_code, str(exc.detail), exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("portal: unexpected error on %s", request.url.path)
    return error_response(request, 500, "internal error; see the portal's log")


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response that has not set them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()
                         if k.encode() not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)
