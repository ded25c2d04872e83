"""HttpAdapter: plain HTTP calls through the item's own connection pool (``requests``)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.base import OutboundAdapter
from adapters.deadline import TryScope
from adapters.failover import join_path, rebase
from adapters.session import (ItemSession, classify_transport_error, exact_text, lossy_text,
                              status_error)
from adapters.settings import COMMON_SETTINGS, http_url
from engine.clock import Clock
from engine.errors import AdapterError, AdapterNotReady, ConfigurationError
from engine.settings import Setting

__all__ = ["HttpAdapter", "HttpResponse"]


@dataclass(frozen=True)
class HttpResponse:
    """A complete response with a status below 400.

    ``content`` holds the body's exact bytes (after any ``Content-Encoding`` is undone);
    :attr:`text` is the body decoded for reading, :attr:`exact_text` the body as text only
    when it is text.
    """

    status: int
    headers: dict[str, str]
    content: bytes

    @property
    def content_type(self) -> str:
        """The Content-Type header ("" when there is none)."""
        return next((v for k, v in self.headers.items() if k.lower() == "content-type"), "")

    @property
    def text(self) -> str:
        """The body decoded with its declared charset (else UTF-8); undecodable bytes are
        replaced, so use :attr:`content` for binary data."""
        return lossy_text(self.content, self.content_type)

    @property
    def body(self) -> str:
        """The same as :attr:`text` (the name operations written before ``content`` use)."""
        return self.text

    @property
    def exact_text(self) -> str | None:
        """The body as text when it is text (a ``text/*``, JSON or XML type, or one with a
        charset it decodes in without loss); None for binary data."""
        return exact_text(self.content, self.content_type)


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    body: bytes | None = None


class HttpAdapter(OutboundAdapter):
    """Sends requests to ``url`` (or to each of ``servers`` in turn) + a path.

    A status ≥ 400 raises :class:`~engine.errors.HttpStatusError`, retryable when the status
    is in ``retry_on_status``. ``credentials`` give HTTP Basic authentication.
    """

    SETTINGS = (
        Setting(name="url", kind=str, default=None, check=http_url,
                help="the endpoint; with servers, their origins replace its own"),
        *COMMON_SETTINGS,
    )

    def __init__(self, settings: Mapping[str, Any], *, item_name: str = "", pool_size: int = 1,
                 env: Mapping[str, str] | None = None, clock: Clock | None = None) -> None:
        super().__init__(settings, item_name=item_name, pool_size=pool_size, env=env,
                         clock=clock)
        if not self.settings["url"] and not self.settings["servers"]:
            raise ConfigurationError("an HTTP item needs url (or servers), an http:// or "
                                     "https:// URL", item=item_name or None, key="url")
        self._session: ItemSession | None = None

    def send(self, method: str, path: str = "", *, headers: Mapping[str, str] | None = None,
             json: Any = None, body: str | bytes | None = None) -> HttpResponse:
        """Send ``method`` to the chosen server + ``path`` ("" or "/" = the URL itself).

        ``json`` is serialised as the body; otherwise ``body`` is sent as it is (a ``str``
        as UTF-8).
        """
        data = body.encode("utf-8") if isinstance(body, str) else body
        return self.call(_Request(method.upper(), path, dict(headers or {}), json, data))

    def _open(self) -> None:
        self.stop()  # a start() after a failed one
        auth = None
        if self.credentials is not None:
            auth = (self.credentials.username, self.credentials.password)
        self._session = ItemSession.from_settings(self.settings, pool_size=self.pool_size,
                                                  hosts=len(self._targets()), auth=auth)

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _targets(self) -> list[str]:
        url, servers = self.settings["url"], self.settings["servers"]
        if not servers:
            return [url]
        return [rebase(url, s) if url else s for s in servers]

    def _transmit(self, server: str, request: _Request, scope: TryScope) -> HttpResponse:
        if self._session is None:
            raise AdapterNotReady(f"item {self.item_name!r}: the adapter is not started")
        url = join_path(server, request.path)
        headers = {**request.headers, **self.attempt_headers()}
        response = self._session.request(request.method, url, scope, headers=headers,
                                         data=request.body, json=request.json)
        if response.status_code >= 400:
            raise status_error(response, self.retry_on_status, url)
        return HttpResponse(status=response.status_code, headers=dict(response.headers),
                            content=response.content)

    def _classify(self, exc: Exception, scope: TryScope, server: str) -> AdapterError | None:
        return classify_transport_error(exc, scope, server, self.response_timeout)
