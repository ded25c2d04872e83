"""HttpService: plain HTTP endpoints whose requests become messages (docs/inbound.md).

.. code-block:: toml

    [[items]]
    name = "OrdersHttp"
    class = "engine.inbound:HttpService"
    [items.settings]
    routes = [{method = "POST", path = "/orders/{id}", target = "Router"}]
    mode = "sync"                    # sync: answer with the target's response; async: 202
    headers = ["x-request-id"]       # request headers copied into the message
    response_timeout = 10
    auth = "token"                   # none (loopback callers only) | basic | token

A request on a route becomes the message ``{"method", "path", "path_params", "query",
"headers", "json" | "body" | "body_base64"}`` (``path_params`` and ``query`` only when there
are some: the message of a route without parameters, called without a query, is an
:class:`operations.http.HttpRequest`, so such a route may target an HttpOperation
directly — an HTTP passthrough): a JSON body (``application/json`` or
``+json``) as ``json``, a text body (``text/*``, XML, a form, or one that decodes as its
charset) as ``body``, any other as ``body_base64``; ``query`` holds each parameter's value
(a list when it is repeated); ``headers`` only those named by the ``headers`` setting.

``mode = "sync"`` waits for the target: a response shaped like
:class:`operations.http.HttpOperation`'s (``{"status", "headers", "body" | "body_base64"}``)
sets the answer's status, headers and body — so an HTTP passthrough is a route to an
HttpOperation — any other is answered ``200`` with it as JSON; a target that ends in
``Error`` answers ``502``, one not done within ``response_timeout`` ``504`` (it goes on),
both ``{"error", "id", "session_id"}``. ``mode = "async"`` answers ``202 {"id",
"session_id"}`` once the message is committed. Refusals create nothing: ``400`` (a body
that is not JSON, or does not fit the target's message class), ``404`` (no such path, from
the inbound server), ``405`` (a method the path has no route for), ``413`` (over
``max_body_bytes``), ``401``/``403``/``429`` (authentication), ``422`` (an
Idempotency-Key used with another body), each ``{"error": "..."}``.
"""
from __future__ import annotations

import base64
import codecs
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, compile_path

from engine.client import IdempotencyConflict, decode_body
from engine.clock import utcnow
from engine.errors import ConfigurationError, MessageError
from engine.eventsink import EventSink
from engine.host import TargetRef
from engine.inbound.base import COMMON_SETTINGS, InboundService
from engine.inbound.body import INLINE_PARSE_BYTES, read_body
from engine.inbound.calls import Caller, Ended, InboundContext, call_record, scoped_key, submit
from engine.inbound.refusals import Refused
from engine.serving.client_gone import client_gone
from engine.serving.threads import to_thread
from engine.settings import Setting
from engine.store.statuses import Status

__all__ = ["HTTP_SERVICE_SETTINGS", "HttpService"]

log = logging.getLogger(__name__)

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
ROUTE_KEYS = {"method", "path", "target"}
# headers of a target's response that describe its own transfer, not the answer's
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length",
               "content-encoding", "te", "trailer", "upgrade", "proxy-connection"}
BINARY_KINDS = {"image", "audio", "video", "font"}  # content types always sent as base64
REPLY_KEYS = {"status", "headers", "body", "body_base64"}


def _check_routes(value: list[Any]) -> list[dict[str, str]]:
    if not value:
        raise ValueError('expected at least one route, e.g. routes = [{method = "POST", '
                         'path = "/orders/{id}", target = "Router"}]')
    routes, seen = [], set()
    for number, route in enumerate(value, start=1):
        where = f"route {number}"
        if not isinstance(route, dict) or set(route) != ROUTE_KEYS:
            raise ValueError(f"{where}: expected a table with exactly method, path and "
                             f'target, e.g. {{method = "POST", path = "/orders/{{id}}", '
                             f'target = "Router"}}')
        method = str(route["method"]).upper()
        if method not in METHODS:
            raise ValueError(f"{where}: method {route['method']!r} is not one of "
                             f"{', '.join(METHODS)}")
        path = route["path"]
        if not isinstance(path, str) or not path.startswith("/") or "?" in path:
            raise ValueError(f"{where}: path {path!r} must start with / and hold no query")
        try:
            compile_path(path)
        except (ValueError, AssertionError) as exc:
            raise ValueError(f"{where}: path {path!r}: {exc}") from exc
        if not isinstance(route["target"], str) or not route["target"]:
            raise ValueError(f"{where}: target must be an item name")
        if (method, path) in seen:
            raise ValueError(f"{where}: {method} {path} is given twice")
        seen.add((method, path))
        routes.append({"method": method, "path": path, "target": route["target"]})
    return routes


def _check_headers(value: list[Any]) -> list[str]:
    bad = [h for h in value if not isinstance(h, str) or not h or ":" in h]
    if bad:
        raise ValueError(f"expected header names, e.g. headers = [\"x-request-id\"]; not "
                         f"names: {', '.join(repr(b) for b in bad)}")
    return [h.lower() for h in value]


HTTP_SERVICE_SETTINGS: tuple[Setting, ...] = (
    Setting(name="routes", kind=list, default=[], check=_check_routes,
            help='[{method = "POST", path = "/orders/{id}", target = "Router"}, ...]'),
    Setting(name="mode", kind=str, default="sync", choices=("sync", "async"),
            help="sync: answer with the target's response; async: answer 202 with the id"),
    Setting(name="headers", kind=list, default=[], check=_check_headers,
            help="names of the request headers copied into the message"),
    *COMMON_SETTINGS,
)


class HttpService(InboundService):
    """HTTP routes whose requests go to their targets as messages."""

    SETTINGS: ClassVar[tuple[Setting, ...]] = HTTP_SERVICE_SETTINGS

    def __init__(self, name: str, settings: Mapping[str, Any], *,
                 events: EventSink | None = None) -> None:
        super().__init__(name, settings, events=events)
        self.route_table: list[dict[str, str]] = list(self.settings["routes"])
        if not self.route_table:
            raise ConfigurationError("an HttpService needs routes", item=name, key="routes")
        self.mode: str = self.settings["mode"]
        self.copied_headers: tuple[str, ...] = tuple(self.settings["headers"])

    @classmethod
    def declared_targets(cls, settings: Mapping[str, Any]) -> tuple[TargetRef, ...]:
        return tuple(TargetRef("routes", f"route {n} ({r['method']} {r['path']})", r["target"])
                     for n, r in enumerate(settings.get("routes") or (), start=1))

    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r["path"] for r in self.route_table))

    def routes(self, context: InboundContext) -> list[BaseRoute]:
        routes: list[BaseRoute] = []
        for path in self.paths():
            targets = {r["method"]: r["target"] for r in self.route_table if r["path"] == path}

            async def endpoint(request: Request, targets: dict[str, str] = targets) -> Response:
                return await self._handle(context, request, targets)
            routes.append(Route(path, endpoint, methods=list(METHODS), name=f"{self.name}:{path}"))
        return routes

    # -- requests ------------------------------------------------------------------------
    async def _handle(self, context: InboundContext, request: Request,
                      targets: Mapping[str, str]) -> Response:
        client = request.client
        caller = Caller(client.host if client else "unknown", client.port if client else 0)
        received_at = utcnow()
        asked = f"{request.method} {request.url.path}"
        try:
            target = targets.get(request.method)
            if target is None:
                raise Refused(405, f"{request.method} is not allowed on {request.url.path}; "
                                   f"allowed: {', '.join(sorted(targets))}",
                              headers={"Allow": ", ".join(sorted(targets))})
            principal = await self._principal(context, request, caller)
            caller = Caller(caller.host, caller.port, principal)
            body = await read_body(request, self.max_body_bytes)
            message = (self._message(request, body) if len(body) <= INLINE_PARSE_BYTES
                       else await to_thread(self._message, request, body))
            key = scoped_key(self.name, caller, request.headers.get("idempotency-key"))
            ended = await submit(context, self.name, target, message, key=key,
                                 wait=self.response_timeout if self.mode == "sync" else None)
        except Refused as exc:
            return self._refuse(context, caller, exc.status, exc.text, exc.headers)
        except HTTPException as exc:  # a bad Idempotency-Key, as the intake API says it
            return self._refuse(context, caller, exc.status_code, str(exc.detail))
        except IdempotencyConflict as exc:
            return self._refuse(context, caller, 422, str(exc))
        except MessageError as exc:
            return self._refuse(context, caller, 400, str(exc))
        except ClientDisconnect:  # gone mid-body: counted, not traced
            return client_gone(self.name, caller.host)
        except Exception:  # the store is down, say: the caller hears it
            log.exception("%s: a request could not be taken in", self.name)
            return JSONResponse({"error": "the request could not be taken in (the daemon's "
                                          "log says why); try again"}, 503)
        response = self._answer(target, ended)
        if not ended.accepted.created:
            response.headers["idempotent-replayed"] = "true"
        context.recorder.add(call_record(ended.accepted.id, self.name, caller, asked,
                                         received_at, str(response.status_code)))
        return response

    async def _principal(self, context: InboundContext, request: Request,
                         caller: Caller) -> str | None:
        header = request.headers.get("authorization")
        if self.auth == "none":
            return context.auth.principal("none", header, caller.host)
        return await to_thread(context.auth.principal, self.auth, header, caller.host)

    def _message(self, request: Request, content: bytes) -> dict[str, Any]:
        values: dict[str, list[str]] = {}
        for key, value in request.query_params.multi_items():  # linear: one key 16,000 times
            values.setdefault(key, []).append(value)
        query = {k: v[0] if len(v) == 1 else v for k, v in values.items()}
        message: dict[str, Any] = {
            "method": request.method, "path": request.url.path,
            "headers": {h: request.headers[h] for h in self.copied_headers if h in request.headers},
        }
        if request.path_params:  # only when there are: without, it is an HttpRequest
            message["path_params"] = {k: str(v) for k, v in request.path_params.items()}
        if query:
            message["query"] = query
        if content:
            message.update(_body_fields(request.headers.get("content-type", ""), content))
        return message

    def _answer(self, target: str, ended: Ended) -> Response:
        accepted, outcome = ended.accepted, ended.outcome
        ids = {"id": accepted.id, "session_id": accepted.session_id}
        if self.mode == "async":
            return JSONResponse(ids, 202)
        if ended.stopping:
            return JSONResponse({"error": f"the daemon is stopping; message {accepted.id} "
                                          "goes on", **ids}, 503)
        if outcome is None:
            return JSONResponse({"error": f"message {accepted.id} to {target!r} not finished "
                                          f"after {self.response_timeout:g} s "
                                          "(response_timeout); it goes on", **ids}, 504)
        if outcome["status"] != Status.COMPLETED:
            return JSONResponse({"error": f"message {accepted.id} to {target!r} ended "
                                          f"{outcome['status']}: "
                                          f"{outcome['error'] or 'no error text'}",
                                 "status": outcome["status"], **ids}, 502)
        return _response_of(outcome["response"])

    def _refuse(self, context: InboundContext, caller: Caller, status: int, text: str,
                headers: Mapping[str, str] | None = None) -> Response:
        context.refusals.refused(self.name, caller.host, text)
        return JSONResponse({"error": text}, status, headers=dict(headers or {}))


def _body_fields(content_type: str, content: bytes) -> dict[str, Any]:
    """``json``, ``body`` or ``body_base64`` for a request body (see the module doc);
    MessageError (400) for a JSON body that is not JSON."""
    kind, _, params = content_type.partition(";")
    kind = kind.strip().lower()
    charset = "utf-8"
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "charset" and value:
            charset = value.strip('"').lower()
    if kind == "application/json" or kind.endswith("+json"):
        try:
            text = content.decode(charset)
        except (UnicodeDecodeError, LookupError) as exc:
            raise MessageError(f"request: the JSON body is not {charset} text: {exc}") from exc
        return {"json": decode_body(text, where="request")}
    if kind == "application/octet-stream" or kind.split("/")[0] in BINARY_KINDS:
        return {"body_base64": base64.b64encode(content).decode("ascii")}
    try:
        codecs.lookup(charset)
        return {"body": content.decode(charset)}
    except (UnicodeDecodeError, LookupError):
        return {"body_base64": base64.b64encode(content).decode("ascii")}


def _response_of(response: Any) -> Response:
    """The answer for a target's response: HttpOperation-shaped sets status, headers and
    body; anything else is 200 JSON."""
    if (isinstance(response, dict) and set(response) <= REPLY_KEYS
            and isinstance(response.get("status"), int) and 100 <= response["status"] <= 599):
        headers = {str(k): str(v) for k, v in (response.get("headers") or {}).items()
                   if str(k).lower() not in HOP_HEADERS}
        if response.get("body_base64") is not None:
            content: bytes = base64.b64decode(response["body_base64"])
        else:
            content = str(response.get("body") or "").encode("utf-8")
        return Response(content, response["status"], headers=headers)
    return JSONResponse(response, 200)
