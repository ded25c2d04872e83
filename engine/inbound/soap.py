"""SoapService: a SOAP endpoint from a WSDL, contract first (docs/inbound.md).

A request is parsed into ``{"operation": NAME, "args": {...}}``, the request body of
:class:`operations.soap.SoapOperation`, so a passthrough is a Router to one. The served
WSDL's addresses never come from the request's ``Host`` header, which a cache in front would
keep for everyone.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from adapters.soap_transport import local_path, origin_of
from adapters.xml_guard import XML_LIMIT_SETTINGS, XmlLimits
from engine.client import IdempotencyConflict
from engine.clock import utcnow
from engine.errors import ConfigurationError, MessageError
from engine.eventsink import EventSink
from engine.host import TargetRef
from engine.inbound.base import COMMON_SETTINGS, InboundService
from engine.inbound.body import read_body
from engine.inbound.calls import Caller, InboundContext, call_record, scoped_key, submit
from engine.inbound.refusals import Refused
from engine.inbound.wsdl import (
    CONTENT_TYPES,
    SOAP11,
    SOAP12,
    ClientFault,
    SoapCall,
    SoapContract,
    fault_envelope,
)
from engine.serving.client_gone import client_gone
from engine.serving.threads import to_thread
from engine.settings import Setting
from engine.store.statuses import Status

__all__ = ["SOAP_SERVICE_SETTINGS", "SoapService"]

log = logging.getLogger(__name__)

WSDL_RETRY = 10.0  # seconds between two tries to load a WSDL that failed to load


def _local_wsdl(value: str) -> str:
    if not value or origin_of(value) is not None or local_path(value) is None:
        raise ValueError(f"{value!r} is not allowed; expected the path of a local WSDL file, "
                         "like 'wsdl/orders.wsdl' (a service's contract is the operator's own "
                         "file)")
    return value


def _public_url(value: str) -> str:
    if origin_of(value) is None or any(c in value for c in "?# "):
        raise ValueError(f"{value!r} is not allowed; expected the http(s) URL clients call the "
                         "service at, like 'https://soap.example.com/soap/orders' (no query)")
    return value


def check_path(value: str) -> str:
    if not value.startswith("/") or any(c in value for c in "?#{} ") or "//" in value:
        raise ValueError(f"{value!r} is not allowed; expected a URL path like '/soap/orders' "
                         "(starting with /, no query, no spaces, no {parameters})")
    return value.rstrip("/") or "/"


SOAP_SERVICE_SETTINGS: tuple[Setting, ...] = (
    Setting(name="wsdl", kind=str, default=None, check=_local_wsdl, path=True,
            help="path of the service's WSDL file (its imports: files beside it)"),
    Setting(name="path", kind=str, default=None, check=check_path,
            help="URL path the service answers, e.g. '/soap/orders'"),
    Setting(name="target", kind=str, default=None,
            help="item that receives {\"operation\": NAME, \"args\": {...}}"),
    Setting(name="public_url", kind=str, default=None, check=_public_url,
            help="URL clients call the service at, written into the served WSDL; unset: "
                 "the address the server is bound to"),
    *COMMON_SETTINGS,
    *XML_LIMIT_SETTINGS,
)


class SoapService(InboundService):
    """An inbound SOAP endpoint for the WSDL ``wsdl`` at ``path``, sending to ``target``."""

    SETTINGS: ClassVar[tuple[Setting, ...]] = SOAP_SERVICE_SETTINGS

    def __init__(self, name: str, settings: Mapping[str, Any], *,
                 events: EventSink | None = None) -> None:
        super().__init__(name, settings, events=events)
        for key in ("wsdl", "path", "target"):
            if not self.settings.get(key):
                raise ConfigurationError(f"a SoapService needs {key}", item=name, key=key)
        self.path: str = self.settings["path"]
        self.target: str = self.settings["target"]
        self.public_url: str | None = self.settings["public_url"]
        self.contract = SoapContract(self.settings["wsdl"], XmlLimits.of(self.settings))
        self._load_lock = threading.Lock()
        self._next_load = 0.0  # monotonic seconds of the next try to load a failed WSDL
        self._load_failed = False

    @classmethod
    def declared_targets(cls, settings: Mapping[str, Any]) -> tuple[TargetRef, ...]:
        target = settings.get("target")
        return (TargetRef("target", "target", target),) if target else ()

    def paths(self) -> tuple[str, ...]:
        return (self.path,)

    def routes(self, context: InboundContext) -> list[BaseRoute]:
        async def endpoint(request: Request) -> Response:
            return await self._handle(context, request)
        return [Route(self.path, endpoint, methods=["GET", "POST"], name=self.name)]

    def start(self) -> None:
        self._loaded()

    def prepare(self) -> None:
        """At a reload the WSDL must load, else the reload is refused."""
        try:
            self.contract.load()
        except Exception as exc:  # zeep, lxml and the policy raise many kinds
            raise ConfigurationError(f"cannot load the WSDL {self.contract.path}: "
                                     f"{type(exc).__name__}: {exc}", item=self.name,
                                     key="wsdl") from exc

    # -- the WSDL ------------------------------------------------------------------------
    def _loaded(self) -> bool:
        """True once the WSDL is loaded; tries again every WSDL_RETRY seconds."""
        if self.contract.loaded:
            return True
        with self._load_lock:
            if self.contract.loaded or time.monotonic() < self._next_load:
                return self.contract.loaded
            try:
                self.contract.load()
            except Exception as exc:  # a bad WSDL is the item's error
                self._next_load = time.monotonic() + WSDL_RETRY
                if not self._load_failed:
                    self.log_error(f"cannot load the WSDL {self.contract.path}: "
                                   f"{type(exc).__name__}: {exc}; the service answers Server "
                                   f"faults and tries again every {WSDL_RETRY:g} s")
                self._load_failed = True
                return False
            if self._load_failed:
                self.log_info(f"WSDL {self.contract.path} loaded")
            return True

    # -- requests ------------------------------------------------------------------------
    async def _handle(self, context: InboundContext, request: Request) -> Response:
        client = request.client
        caller = Caller(client.host if client else "unknown", client.port if client else 0)
        received_at = utcnow()
        envelope = _envelope_of(request.headers.get("content-type", ""))
        call: SoapCall | None = None
        try:
            principal = await self._principal(context, request, caller)
            caller = Caller(caller.host, caller.port, principal)
            if request.method == "GET":
                return await self._wsdl(request)
            if not self.contract.loaded and not await to_thread(self._loaded):
                return _fault(envelope, "Server", "the service's WSDL is not loaded: see the "
                                                  "event log", 503)
            body = await read_body(request, self.max_body_bytes)
            call = await to_thread(self._parse, request, body, envelope)
            envelope = call.envelope
            key = scoped_key(self.name, caller, request.headers.get("idempotency-key"))
            ended = await submit(context, self.name, self.target,
                                 {"operation": call.name, "args": call.args}, key=key,
                                 wait=self.response_timeout)
        except Refused as exc:
            return self._refuse(context, caller, envelope, exc.text, exc.status, exc.headers)
        except HTTPException as exc:  # a bad Idempotency-Key, as the intake API says it
            return self._refuse(context, caller, envelope, str(exc.detail), exc.status_code)
        except ClientFault as exc:
            return self._refuse(context, caller, exc.envelope, str(exc), 500, code=exc.code)
        except IdempotencyConflict as exc:
            return self._refuse(context, caller, envelope, str(exc), 422)
        except MessageError as exc:
            return self._refuse(context, caller, envelope, f"the request does not fit the "
                                                           f"target {self.target!r}: {exc}", 500)
        except ClientDisconnect:  # gone mid-body: counted, not traced
            return client_gone(self.name, caller.host)
        except Exception:  # the store is down, say: the caller hears it
            log.exception("%s: a request could not be taken in", self.name)
            return _fault(envelope, "Server", "the request could not be taken in (the "
                                              "daemon's log says why); try again", 503)
        response, answer = self._answer(call, ended)
        if not ended.accepted.created:
            response.headers["idempotent-replayed"] = "true"
        context.recorder.add(call_record(ended.accepted.id, self.name, caller,
                                         f"SOAP {call.name}", received_at, answer))
        return response

    async def _principal(self, context: InboundContext, request: Request,
                         caller: Caller) -> str | None:
        header = request.headers.get("authorization")
        if self.auth == "none":
            return context.auth.principal("none", header, caller.host)
        return await to_thread(context.auth.principal, self.auth, header, caller.host)

    def _answer(self, call: SoapCall, ended: Any) -> tuple[Response, str]:
        """The response to send for ``call``'s message end, and a short text of it."""
        accepted, outcome = ended.accepted, ended.outcome
        if ended.stopping:
            text = f"the daemon is stopping; message {accepted.id} goes on"
            return _fault(call.envelope, "Server", text, 503), f"fault Server: {text}"
        if outcome is None:
            text = (f"message {accepted.id} to {self.target!r} not finished after "
                    f"{self.response_timeout:g} s (response_timeout); it goes on")
            return _fault(call.envelope, "Server", text), f"fault Server: {text}"
        if outcome["status"] != Status.COMPLETED:
            text = (f"message {accepted.id} to {self.target!r} ended {outcome['status']}: "
                    f"{outcome['error'] or 'no error text'}")
            return _fault(call.envelope, "Server", text), f"fault Server: {text}"
        response = outcome["response"]
        result = response.get("result") if isinstance(response, dict) else response
        try:
            content = self.contract.response(call, result)
        except ValueError as exc:
            return _fault(call.envelope, "Server", str(exc)), f"fault Server: {exc}"
        return (Response(content, 200, media_type=CONTENT_TYPES[call.envelope]),
                f"200 {call.name} response")

    def _parse(self, request: Request, body: bytes, envelope: str) -> SoapCall:
        """The call in ``body`` (on a thread: parsing is CPU), with the request's action."""
        return self.contract.parse(body, action=_action_of(request.headers, envelope),
                                   hint=envelope)

    def _refuse(self, context: InboundContext, caller: Caller, envelope: str, text: str,
                status: int, headers: Mapping[str, str] | None = None, *,
                code: str = "Client") -> Response:
        context.refusals.refused(self.name, caller.host, text)
        response = _fault(envelope, code, text, status)
        response.headers.update(headers or {})
        return response

    async def _wsdl(self, request: Request) -> Response:
        asked = {k.lower(): v for k, v in request.query_params.items()}
        if "wsdl" not in asked and "xsd" not in asked:
            return Response(f"GET {self.path}?wsdl serves the WSDL (and ?xsd=NAME the schema "
                            "files it references); SOAP requests are POSTs\n", 400,
                            media_type="text/plain")
        if not self.contract.loaded and not await to_thread(self._loaded):
            return Response("the service's WSDL is not loaded: see the event log\n", 503,
                            media_type="text/plain")
        address = self.public_url or _bound_address(request, self.path)
        name = asked.get("xsd") if "wsdl" not in asked else None
        document = self.contract.served(address, name or None)
        if document is None:
            known = ", ".join(self.contract.imported) or "none"
            return Response(f"the WSDL references no document {name!r} (documents: "
                            f"{known})\n", 404, media_type="text/plain")
        return Response(document, 200, media_type="text/xml; charset=utf-8")


def _envelope_of(content_type: str) -> str:
    """The envelope a refusal answers in before the request was parsed."""
    return SOAP12 if "application/soap+xml" in content_type.lower() else SOAP11


def _action_of(headers: Mapping[str, str], envelope: str) -> str | None:
    """The SOAP action a request names: SOAP 1.2's ``action`` parameter of its Content-Type,
    SOAP 1.1's ``SOAPAction`` header; unquoted, None when there is none."""
    if envelope == SOAP12:
        for param in headers.get("content-type", "").split(";")[1:]:
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "action":
                return value.strip().strip('"')
        return None
    action = headers.get("soapaction")
    return action.strip().strip('"') if action is not None else None


def _bound_address(request: Request, path: str) -> str:
    """The service's URL at the address the request came in on: the server's own socket
    (scope ``server``) and scheme, nothing the client wrote (no ``Host`` header)."""
    host, port = request.scope.get("server") or ("127.0.0.1", 0)
    host = f"[{host}]" if ":" in host else host
    return f"{request.scope.get('scheme', 'http')}://{host}:{port}{path}"


def _fault(envelope: str, code: str, text: str, status: int | None = None) -> Response:
    if status is None or status == 500:
        status = 400 if envelope == SOAP12 and code == "Client" else 500
    return Response(fault_envelope(envelope, code, text), status,
                    media_type=CONTENT_TYPES[envelope])
