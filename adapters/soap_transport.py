"""The zeep transport of a :class:`~adapters.soap.SoapAdapter`.

zeep's own transport reads responses with per-socket-read timeouts and logs whole envelopes
(credentials included) at DEBUG. This one hands every POST to the adapter (deadline-bounded,
size-limited, idempotency header added) and loads WSDL and XSD documents through the same
session under the deadline of :meth:`SoapAdapter.start`, without logging any content.
"""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
import zeep

from adapters.deadline import current_scope, try_scope

if TYPE_CHECKING:
    from adapters.session import ItemSession
    from adapters.soap import SoapAdapter


class DeadlineTransport(zeep.Transport):
    """Sends through the item's :class:`~adapters.session.ItemSession`."""

    def __init__(self, adapter: SoapAdapter, session: ItemSession) -> None:
        super().__init__(session=session.requests, timeout=adapter.response_timeout,
                         operation_timeout=adapter.response_timeout)
        self._adapter = adapter
        self._item_session = session

    def post(self, address: str, message: Any, headers: Mapping[str, str]) -> requests.Response:
        return self._adapter.post(address, message, headers)

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
        """The scope in force (start()'s, an attempt's), else a fresh one for this request."""
        scope = current_scope()
        if scope is not None:
            return nullcontext(scope)
        return try_scope(self._adapter.clock.monotonic() + self._adapter.response_timeout,
                         self._adapter.clock.monotonic)
