"""The zeep transport of a :class:`~adapters.soap.SoapAdapter`.

zeep's own transport reads responses with per-socket-read timeouts and logs whole envelopes
(credentials included) at DEBUG. This one sends every POST through the item's session
(deadline-bounded, size-limited, the idempotency header added) and loads WSDL and XSD
documents the same way under the deadline of :meth:`SoapAdapter.start`, logging no content.
"""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
import zeep

from adapters.deadline import current_scope, try_scope
from adapters.session import ItemSession, status_error

if TYPE_CHECKING:
    from adapters.soap import SoapAdapter


class DeadlineTransport(zeep.Transport):
    """Sends through the item's :class:`~adapters.session.ItemSession`."""

    def __init__(self, adapter: SoapAdapter, session: ItemSession) -> None:
        super().__init__(session=session.requests, timeout=adapter.response_timeout,
                         operation_timeout=adapter.response_timeout)
        self._adapter = adapter
        self._item_session = session

    def post(self, address: str, message: Any, headers: Mapping[str, str]) -> requests.Response:
        """One SOAP call: the idempotency header added, the body read under the deadline.

        A status ≥ 400 that cannot carry a SOAP fault raises
        :class:`~engine.errors.HttpStatusError` here, with the response's headers.
        """
        with self._scope() as scope:
            response = self._item_session.request(
                "POST", address, scope, data=message,
                headers={**headers, **self._adapter.attempt_headers()})
        if response.status_code >= 400 and not _may_be_fault(response):
            raise status_error(response, self._adapter.retry_on_status, address)
        return response

    def get(self, address: str, params: Any, headers: Mapping[str, str]) -> requests.Response:
        with self._scope() as scope:
            return self._item_session.request("GET", address, scope, headers=headers)

    def _load_remote_data(self, url: str) -> bytes:
        if urlsplit(url).scheme == "file":
            return bytes(super()._load_remote_data(url))
        with self._scope() as scope:
            response = self._item_session.request("GET", url, scope, allow_redirects=True)
        response.raise_for_status()
        return response.content

    def _scope(self) -> Any:
        """The scope in force (start()'s, an attempt's), else one ending at the deadline of
        the current attempt (zeep used directly, outside ``invoke``)."""
        scope = current_scope()
        if scope is not None:
            return nullcontext(scope)
        return try_scope(self._adapter.current_attempt().deadline, self._adapter.clock.monotonic)


def _may_be_fault(response: requests.Response) -> bool:
    """SOAP faults come as 500 (SOAP 1.1 and 1.2) or 400 (SOAP 1.2 Sender), in XML."""
    kind = response.headers.get("Content-Type", "").lower()
    return response.status_code in (400, 500) and "xml" in kind and bool(response.content)
