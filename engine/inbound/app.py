"""The inbound server's ASGI app: every inbound service's routes on one Starlette app.

A path no service answers is refused with ``404 {"error": ...}`` (logged once per client
and minute, as every refusal); two services may not claim the same path.
"""
from __future__ import annotations

from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from engine.errors import ConfigurationError
from engine.inbound.base import InboundService
from engine.inbound.calls import InboundContext
from engine.serving.client_gone import on_client_gone

SERVER_NAME = "inbound"  # the refusal log's name for what no service answered


def create_app(services: Sequence[InboundService], context: InboundContext) -> Starlette:
    """The app serving ``services``; ConfigurationError if two claim one path."""
    claimed: dict[str, str] = {}
    routes: list[BaseRoute] = []
    for service in services:
        for path in service.paths():
            if path in claimed:
                raise ConfigurationError(f"path {path} is claimed by {claimed[path]!r} too; "
                                         "each inbound service needs paths of its own",
                                         item=service.name, key="path")
            claimed[path] = service.name
        routes.extend(service.routes(context))

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        text = (f"no inbound service at {request.url.path}" if status == 404
                else str(getattr(exc, "detail", exc)))
        client = request.client.host if request.client else "unknown"
        context.refusals.refused(SERVER_NAME, client, f"{request.method} "
                                                      f"{request.url.path}: {text}")
        return JSONResponse({"error": text}, status)

    return Starlette(routes=routes, exception_handlers={
        404: not_found, 405: not_found, ClientDisconnect: on_client_gone(SERVER_NAME)})
