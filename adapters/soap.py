"""SoapAdapter: WSDL operations through zeep, on the item's own deadline-bounded session.

The zeep client is built once, in :meth:`SoapAdapter.start`, from ``wsdl`` (fetched within
``response_timeout``); a WSDL that cannot be loaded raises
:class:`~engine.errors.AdapterNotReady` and the worker tries again later. Responses are parsed
with DTDs, entities and external references forbidden (no XXE, no billion laughs).
"""
from __future__ import annotations

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
from adapters.deadline import TryScope, try_scope
from adapters.failover import rebase
from adapters.session import ItemSession, classify_transport_error, describe
from adapters.settings import COMMON_SETTINGS, not_empty
from adapters.soap_transport import DeadlineTransport
from engine.errors import (AdapterError, AdapterNotReady, ConfigurationError, HttpStatusError,
                           RemoteFault, ResponseRejected)
from engine.retry.reply_codes import local_name
from engine.settings import Setting

__all__ = ["SoapAdapter"]

log = logging.getLogger(__name__)

_LOAD_ERRORS = (requests.RequestException, urllib3.exceptions.HTTPError,
                http.client.HTTPException, OSError, zeep.exceptions.Error, lxml.etree.Error,
                ValueError, AdapterError)
_FORBIDDEN_XML = (zeep.exceptions.DTDForbidden, zeep.exceptions.EntitiesForbidden,
                  zeep.exceptions.ExternalReferenceForbidden)


@dataclass(frozen=True)
class _Call:
    operation: str
    args: dict[str, Any] = field(default_factory=dict)


class SoapAdapter(OutboundAdapter):
    """Invokes operations of the WSDL's first service port, or of the same binding at each of
    ``servers`` (a bare ``http://host:port`` keeps the WSDL address's path).

    ``credentials`` are sent as a WS-Security UsernameToken (``auth = "wsse"``, the default)
    or as HTTP Basic authentication (``auth = "basic"``).
    """

    SETTINGS = (
        Setting(name="wsdl", kind=str, default=None, check=not_empty,
                help="URL or path of the WSDL, loaded once at start"),
        Setting(name="auth", kind=str, default="wsse", choices=("wsse", "basic"),
                help="how credentials are sent"),
        *COMMON_SETTINGS,
    )

    def __init__(self, settings: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        if not self.settings["wsdl"]:
            raise ConfigurationError("a SOAP item needs wsdl, the URL or path of its WSDL",
                                     item=self.item_name or None, key="wsdl")
        self._session: ItemSession | None = None
        self._client: zeep.Client | None = None
        self._services: dict[str, ServiceProxy] = {}
        self._operations: tuple[str, ...] = ()

    @property
    def operations(self) -> tuple[str, ...]:
        """The operation names the WSDL offers (empty before :meth:`start`)."""
        return self._operations

    def invoke(self, operation: str, args: Mapping[str, Any] | None = None) -> Any:
        """Call ``operation`` with ``args`` as keyword arguments; return zeep's result.

        Callers turn the result into plain data with ``zeep.helpers.serialize_object``.
        """
        if self._client is None:
            raise AdapterNotReady(f"item {self.item_name!r}: the WSDL is not loaded yet")
        if operation not in self._operations:
            raise InvalidRequest(f"unknown operation {operation!r}; the WSDL offers: "
                                 + ", ".join(self._operations), code="UnknownOperation")
        return self.call(_Call(operation, dict(args or {})))

    # -- transport ------------------------------------------------------------------------

    def _open(self) -> None:
        self.stop()  # a start() after a failed one
        basic = self.credentials is not None and self.settings["auth"] == "basic"
        auth = (self.credentials.username, self.credentials.password) if basic else None
        hosts = max(len(self.settings["servers"]), 1) + 1  # the WSDL's host too
        self._session = ItemSession.from_settings(self.settings, pool_size=self.pool_size,
                                                  hosts=hosts, auth=auth)
        self._client = self._load_client(self._session)
        binding, address = self._default_binding(self._client)
        self._operations = tuple(sorted(binding.all()))
        targets = ([rebase(address or s, s) for s in self.settings["servers"]]
                   or ([address] if address else []))
        if not targets:
            raise ConfigurationError("the WSDL gives no service address; set servers",
                                     item=self.item_name or None, key="servers")
        self._services = {t: self._client.create_service(binding.name, t) for t in targets}
        log.info("item %s: WSDL loaded; operations %s; servers %s", self.item_name,
                 ", ".join(self._operations), ", ".join(targets))

    def _load_client(self, session: ItemSession) -> zeep.Client:
        wsse = None
        if self.credentials is not None and self.settings["auth"] == "wsse":
            wsse = UsernameToken(self.credentials.username, self.credentials.password)
        settings = zeep.Settings(strict=True, xml_huge_tree=False, forbid_dtd=True,
                                 forbid_entities=True, forbid_external=True)
        transport = DeadlineTransport(self, session)
        wsdl = self.settings["wsdl"]
        try:
            with try_scope(self.clock.monotonic() + self.response_timeout, self.clock.monotonic):
                return zeep.Client(wsdl, transport=transport, settings=settings, wsse=wsse)
        except _LOAD_ERRORS as exc:
            session.close()
            raise AdapterNotReady(f"item {self.item_name!r}: cannot load the WSDL {wsdl}: "
                                  f"{_load_reason(exc)}") from exc

    def _default_binding(self, client: zeep.Client) -> tuple[Any, str | None]:
        """The binding and address of the first port of the first service, as zeep's
        ``client.service`` picks them; without a service, the first binding and no address."""
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

    def _targets(self) -> list[str]:
        return list(self._services)

    def _transmit(self, server: str, request: _Call, scope: TryScope) -> Any:
        return self._services[server][request.operation](**request.args)

    # -- classification -------------------------------------------------------------------

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
            return HttpStatusError(f"HTTP {status} from {server} without a SOAP fault",
                                   code=str(status), status_code=status,
                                   headers=scope.headers, retryable=status in self.retry_on_status)
        cause = exc.__context__  # zeep raises TransportError while handling a parse error
        reason = f": {cause}" if isinstance(cause, zeep.exceptions.XMLSyntaxError) else ""
        return ResponseRejected(f"response from {server} (HTTP {status}) refused: "
                                f"not well-formed SOAP XML{reason}")


def _fault_error(exc: zeep.exceptions.Fault, server: str) -> RemoteFault:
    """A fault whose ``code`` is the local name (``Server``, ``Client.Refused``) that
    ``E#<code>`` rules match, whatever prefix the server bound; the text keeps the code as
    the server sent it (``soap11env:Server``)."""
    qualified = str(exc.code) if exc.code is not None else None
    local = local_name(qualified) if qualified else None
    return RemoteFault(f"SOAP fault {qualified or '(no code)'} from {server}: {exc.message}",
                       fault_code=local, retryable=False)


def _load_reason(exc: BaseException) -> str:
    if isinstance(exc, _FORBIDDEN_XML):
        return "it contains a DTD or entities, which are refused"
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"HTTP {exc.response.status_code}"
    return describe(exc)
