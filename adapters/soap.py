"""SoapAdapter: WSDL operations through zeep, on the item's own deadline-bounded session.

The WSDL is loaded at start; responses are parsed with DTDs, entities and external references
forbidden. Where documents may come from and where credentials may go: docs/security.md.
"""
from __future__ import annotations

import copy
import http.client
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import lxml.etree
import requests
import urllib3.exceptions
import zeep
import zeep.exceptions
from zeep.proxy import ServiceProxy
from zeep.wsse.username import UsernameToken

from adapters.base import InvalidRequest, OutboundAdapter
from adapters.deadline import TryScope, attempt_deadline, try_scope
from adapters.failover import rebase
from adapters.session import ItemSession, classify_transport_error, describe, retry_after_note
from adapters.settings import COMMON_SETTINGS, AdapterSettings, not_empty
from adapters.soap_transport import (
    AttemptHooks,
    DeadlineTransport,
    DocumentPolicy,
    HostBoundBasicAuth,
    Origin,
    local_path,
    origin_of,
)
from adapters.urls import redact_userinfo
from adapters.xml_guard import XML_LIMIT_SETTINGS, XmlLimits
from engine.errors import (
    AdapterError,
    AdapterNotReady,
    ConfigurationError,
    DocumentRefused,
    HttpStatusError,
    RemoteFault,
    ResponseRejected,
)
from engine.retry.reply_codes import local_name
from engine.settings import Setting, declared_in, setting

__all__ = ["SOAP_SETTINGS", "SoapAdapter", "SoapAdapterSettings"]

log = logging.getLogger(__name__)

_LOAD_ERRORS = (requests.RequestException, urllib3.exceptions.HTTPError,
                http.client.HTTPException, OSError, zeep.exceptions.Error, lxml.etree.Error,
                ValueError, AdapterError, DocumentRefused)
_FORBIDDEN_XML = (zeep.exceptions.DTDForbidden, zeep.exceptions.EntitiesForbidden,
                  zeep.exceptions.ExternalReferenceForbidden)


def _wsdl_location(value: str) -> str:
    value = not_empty(value)
    if origin_of(value) is None and local_path(value) is None:
        raise ValueError(f"{redact_userinfo(value)!r} is not allowed; expected an http:// or "
                         "https:// URL or the path of a local WSDL file, like "
                         "'https://host:8443/service?wsdl' or '/etc/encore/service.wsdl'")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class SoapAdapterSettings(AdapterSettings, XmlLimits):
    """The settings of :data:`SOAP_SETTINGS`, typed: the common ones, the XML limits, wsdl
    and auth."""

    wsdl: str | None = setting(kind=str, default=None, check=_wsdl_location, path=True,
                               help="http(s) URL or local path of the WSDL, loaded once at start")
    auth: str = setting(kind=str, default="wsse", choices=("wsse", "basic"),
                        help="how credentials are sent")


SOAP_SETTINGS: tuple[Setting, ...] = (*declared_in(SoapAdapterSettings, "wsdl", "auth"),
                                      *COMMON_SETTINGS, *XML_LIMIT_SETTINGS)


@dataclass(frozen=True)
class _Call:
    operation: str
    args: dict[str, Any] = field(default_factory=dict)


class SoapAdapter(OutboundAdapter):
    """Invokes operations of the WSDL's first service port, or of the same binding at each of
    ``servers``; credentials go as a WS-Security token or HTTP Basic (``auth``)."""

    SETTINGS = SOAP_SETTINGS
    settings_class = SoapAdapterSettings
    adapter_settings: SoapAdapterSettings

    def __init__(self, settings: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        if not self.adapter_settings.wsdl:
            raise ConfigurationError("a SOAP item needs wsdl, the URL or path of its WSDL",
                                     item=self.item_name or None, key="wsdl")
        self.wsdl_location: str = self.adapter_settings.wsdl
        self._session: ItemSession | None = None
        self._client: zeep.Client | None = None
        self._services: dict[str, ServiceProxy] = {}
        self._operations: tuple[str, ...] = ()
        self._warnings: list[str] = []

    @property
    def operations(self) -> tuple[str, ...]:
        """The operation names the WSDL offers (empty before :meth:`start`)."""
        return self._operations

    def invoke(self, operation: str, args: Mapping[str, Any] | None = None) -> Any:
        """Call ``operation`` with ``args`` as keyword arguments; return zeep's result."""
        if self._client is None:
            raise AdapterNotReady(f"item {self.item_name!r}: the WSDL is not loaded yet")
        if operation not in self._operations:
            raise InvalidRequest(f"unknown operation {operation!r}; the WSDL offers: "
                                 + ", ".join(self._operations), code="UnknownOperation")
        return self.call(_Call(operation, dict(args or {})))

    def check_call(self, operation: str, args: Mapping[str, Any] | None = None) -> None:
        """Raise :class:`InvalidRequest` unless ``operation`` exists and ``args`` fit it;
        nothing is sent."""
        if self._client is None or not self._services:
            raise AdapterNotReady(f"item {self.item_name!r}: the WSDL is not loaded yet")
        if operation not in self._operations:
            raise InvalidRequest(f"unknown operation {operation!r}; the WSDL offers: "
                                 + ", ".join(self._operations), code="UnknownOperation")
        service = next(iter(self._services.values()))
        try:
            self._client.create_message(service, operation, **dict(args or {}))
        except (TypeError, zeep.exceptions.ValidationError) as exc:
            raise InvalidRequest(f"arguments do not fit the WSDL's {operation}: {exc}",
                                 code="InvalidArguments") from exc

    def start(self) -> list[str]:
        """As :meth:`OutboundAdapter.start`, plus a warning for an untrusted service address."""
        warnings = super().start()
        return self._warnings + warnings

    def _open(self) -> None:
        self.stop()
        hosts = max(len(self.adapter_settings.servers), 1) + 1  # the WSDL's host too
        self._session = ItemSession.from_settings(self.adapter_settings, pool_size=self.pool_size,
                                                  hosts=hosts, url_auth=self.url_credentials)
        self._bind_basic_auth(self._configured_origins())
        self._client = self._load_client(self._session)
        binding, address = self._default_binding(self._client)
        self._operations = tuple(sorted(binding.all()))
        trusted = self._trusted_origins(address)
        self._bind_basic_auth(trusted)
        targets = self._target_urls(address)
        self._services = {t: self._service(binding.name, t, trusted) for t in targets}
        log.info("item %s: WSDL loaded; operations %s; servers %s", self.item_name,
                 ", ".join(self._operations), ", ".join(targets))

    def _load_client(self, session: ItemSession) -> zeep.Client:
        wsse = None
        options = self.adapter_settings
        if self.credentials is not None and options.auth == "wsse":
            wsse = UsernameToken(self.credentials.username, self.credentials.password)
        wsdl = self.wsdl_location
        policy = DocumentPolicy.for_wsdl(wsdl, options.max_response_bytes)
        # DeadlineTransport.load decides which documents may be read; force_https would turn
        # a local WSDL's file:///x into https:///x.
        settings = zeep.Settings(strict=True, xml_huge_tree=False, forbid_dtd=True,
                                 forbid_entities=True, forbid_external=False,
                                 force_https=policy.origin is not None)
        hooks = AttemptHooks(deadline=lambda: self.current_attempt().deadline,
                             headers=self.attempt_headers,
                             retry_on_status=self.retry_on_status,
                             monotonic=self.clock.monotonic,
                             response_timeout=self.response_timeout,
                             xml_limits=XmlLimits.of(self.settings))
        transport = DeadlineTransport(hooks, session, policy)
        try:
            with try_scope(attempt_deadline(self.clock.monotonic(), self.response_timeout),
                           self.clock.monotonic):
                return zeep.Client(wsdl, transport=transport, settings=settings, wsse=wsse)
        except _LOAD_ERRORS as exc:
            session.close()
            raise AdapterNotReady(f"item {self.item_name!r}: cannot load the WSDL {wsdl}: "
                                  f"{_load_reason(exc)}") from exc

    def _configured_origins(self) -> set[Origin]:
        """Scheme, host and port of the ``wsdl`` URL and of each of ``servers``."""
        urls = (self.wsdl_location, *self.adapter_settings.servers)
        return {o for o in map(origin_of, urls) if o is not None}

    def _trusted_origins(self, address: str | None) -> set[Origin]:
        """Where credentials may go: the configured origins, plus a local WSDL's address."""
        trusted = self._configured_origins()
        local_wsdl = origin_of(self.wsdl_location) is None
        if local_wsdl and address and (origin := origin_of(address)) is not None:
            trusted.add(origin)
        return trusted

    def _bind_basic_auth(self, trusted: set[Origin]) -> None:
        assert self._session is not None
        if self.credentials is not None and self.adapter_settings.auth == "basic":
            self._session.requests.auth = HostBoundBasicAuth(
                self.credentials.username, self.credentials.password, trusted)

    def _target_urls(self, address: str | None) -> list[str]:
        """``servers`` (each taking the address's path), else the WSDL's service address."""
        if self.adapter_settings.servers:
            return [rebase(address or s, s) for s in self.adapter_settings.servers]
        if not address:
            raise ConfigurationError("the WSDL gives no service address; set servers",
                                     item=self.item_name or None, key="servers")
        if origin_of(address) is None:
            raise AdapterNotReady(f"item {self.item_name!r}: the WSDL's service address "
                                  f"{address!r} is not an http(s) URL; set servers")
        return [address]

    def _service(self, binding_name: str, target: str, trusted: set[Origin]) -> ServiceProxy:
        """A proxy for ``target``, without the WS-Security token when it is not trusted."""
        assert self._client is not None
        client = self._client
        if origin_of(target) not in trusted:
            if self.credentials is not None:
                self._warnings.append(
                    f"item {self.item_name!r}: the WSDL's service address {target} is not on "
                    "a configured host (the WSDL's own or one of servers); calls go there "
                    "without credentials; list it in servers to send them")
            client = copy.copy(self._client)  # shares the parsed WSDL and the transport
            client.wsse = None
        return client.create_service(binding_name, target)

    def _default_binding(self, client: zeep.Client) -> tuple[Any, str | None]:
        """The binding and address of the first service's first port (else the first binding)."""
        for service in client.wsdl.services.values():
            for port in service.ports.values():
                return port.binding, port.binding_options.get("address")
        for binding in client.wsdl.bindings.values():
            return binding, None
        raise ConfigurationError("the WSDL defines no binding", item=self.item_name or None,
                                 key="wsdl")

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
        self._session, self._client, self._services = None, None, {}
        self._warnings = []

    def _targets(self) -> list[str]:
        return list(self._services)

    def _transmit(self, server: str, request: _Call, scope: TryScope) -> Any:
        return self._services[server][request.operation](**request.args)

    def _classify(self, exc: Exception, scope: TryScope, server: str) -> AdapterError | None:
        if isinstance(exc, zeep.exceptions.Fault):
            return _fault_error(exc, server)
        if isinstance(exc, _FORBIDDEN_XML):
            return ResponseRejected(
                f"response from {server} refused: XML with a DTD, entity declarations or "
                "external references is not accepted (XXE / entity expansion protection)")
        if isinstance(exc, zeep.exceptions.TransportError):
            return self._transport_error(exc, scope, server)
        if isinstance(exc, (zeep.exceptions.XMLSyntaxError, zeep.exceptions.XMLParseError,
                            zeep.exceptions.UnexpectedElementError, lxml.etree.Error)):
            return ResponseRejected(f"response from {server} refused: {describe(exc)}")
        if isinstance(exc, (TypeError, zeep.exceptions.ValidationError)) and not scope.sent:
            return InvalidRequest(f"arguments do not fit the WSDL: {exc}", code="InvalidArguments")
        return classify_transport_error(exc, scope, server, self.response_timeout)

    def _transport_error(self, exc: zeep.exceptions.TransportError, scope: TryScope,
                         server: str) -> AdapterError:
        status = exc.status_code or scope.status_code or 0
        if status >= 400:
            return HttpStatusError(f"HTTP {status} from {server} without a SOAP fault"
                                   f"{retry_after_note(scope.headers)}",
                                   code=str(status), status_code=status,
                                   headers=scope.headers, retryable=status in self.retry_on_status)
        cause = exc.__context__  # zeep raises TransportError while handling a parse error
        reason = f": {cause}" if isinstance(cause, zeep.exceptions.XMLSyntaxError) else ""
        return ResponseRejected(f"response from {server} (HTTP {status}) refused: "
                                f"not well-formed SOAP XML{reason}")


def _fault_error(exc: zeep.exceptions.Fault, server: str) -> RemoteFault:
    """A fault whose ``code`` is the local name that ``E#<code>`` rules match."""
    qualified = str(exc.code) if exc.code is not None else None
    local = local_name(qualified) if qualified else None
    return RemoteFault(f"SOAP fault {qualified or '(no code)'} from {server}: {exc.message}",
                       fault_code=local, retryable=False)


def _load_reason(exc: BaseException) -> str:
    if isinstance(exc, DocumentRefused):
        return str(exc)
    if isinstance(exc, zeep.exceptions.ExternalReferenceForbidden):
        return f"it imports the external document {exc.url}, which is refused"
    if isinstance(exc, _FORBIDDEN_XML):
        return "it contains a DTD or entities, which are refused"
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"HTTP {exc.response.status_code} from {exc.response.url}"
    return describe(exc)
