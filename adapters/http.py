"""HttpAdapter: plain HTTP calls through the item's own connection pool (``requests``)."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests

from adapters.base import OutboundAdapter
from adapters.deadline import TryScope
from adapters.failover import join_path, rebase
from adapters.session import (
    ItemSession,
    classify_transport_error,
    exact_text,
    lossy_text,
    retry_after_note,
    status_error,
)
from adapters.settings import (
    COMMON_SETTINGS,
    DEFAULT_MAX_REDIRECTS,
    AdapterSettings,
    host_list,
    http_url,
)
from adapters.urls import origin
from engine.clock import Clock
from engine.errors import AdapterError, AdapterNotReady, ConfigurationError, HttpStatusError
from engine.settings import Setting, declared_in, setting

__all__ = ["HTTP_SETTINGS", "HttpAdapter", "HttpAdapterSettings", "HttpResponse",
           "RedirectPolicy"]

@dataclass(frozen=True, slots=True, kw_only=True)
class HttpAdapterSettings(AdapterSettings):
    """The settings of :data:`HTTP_SETTINGS`, typed: the common ones, url and redirects."""

    url: str | None = setting(kind=str, default=None, check=http_url,
                              help="the endpoint; with servers, their origins replace its own")
    follow_redirects: bool = setting(
        kind=bool, default=False,
        help="follow 3xx redirects; false: a redirect ends the attempt as http_status")
    max_redirects: int = setting(
        kind=int, default=DEFAULT_MAX_REDIRECTS, minimum=0,
        help="redirects followed in one attempt (with follow_redirects)")
    redirect_hosts: tuple[str, ...] = setting(
        kind=(list, tuple), default=(), check=host_list,
        help="hosts ('host' or 'host:port') a redirect may lead to besides the "
             "server's own scheme, host and port; credentials go only to configured servers")


HTTP_SETTINGS: tuple[Setting, ...] = (
    *declared_in(HttpAdapterSettings, "url"), *COMMON_SETTINGS,
    *declared_in(HttpAdapterSettings, "follow_redirects", "max_redirects", "redirect_hosts"))


@dataclass(frozen=True)
class HttpResponse:
    """A complete response with a status below 400; ``content`` is the decoded body."""

    status: int
    headers: dict[str, str]
    content: bytes

    @property
    def content_type(self) -> str:
        """The Content-Type header ("" when there is none)."""
        return next((v for k, v in self.headers.items() if k.lower() == "content-type"), "")

    @property
    def text(self) -> str:
        """The body decoded with its declared charset (else UTF-8), bad bytes replaced."""
        return lossy_text(self.content, self.content_type)

    @property
    def body(self) -> str:
        """The same as :attr:`text` (the name operations written before ``content`` use)."""
        return self.text

    @property
    def exact_text(self) -> str | None:
        """The body as text when it is text, else None."""
        return exact_text(self.content, self.content_type)


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    body: bytes | None = None


class HttpAdapter(OutboundAdapter):
    """Sends requests to ``url`` (or to each of ``servers`` in turn) + a path; a status
    ≥ 400, or a redirect not followed, raises :class:`~engine.errors.HttpStatusError`."""

    SETTINGS = HTTP_SETTINGS
    settings_class = HttpAdapterSettings
    adapter_settings: HttpAdapterSettings

    def __init__(self, settings: Mapping[str, Any], *, item_name: str = "", pool_size: int = 1,
                 env: Mapping[str, str] | None = None, clock: Clock | None = None) -> None:
        super().__init__(settings, item_name=item_name, pool_size=pool_size, env=env,
                         clock=clock)
        if not self.adapter_settings.url and not self.adapter_settings.servers:
            raise ConfigurationError("an HTTP item needs url (or servers), an http:// or "
                                     "https:// URL", item=item_name or None, key="url")
        self._session: ItemSession | None = None
        self._redirects = RedirectPolicy.from_settings(self.adapter_settings)

    def send(self, method: str, path: str = "", *, headers: Mapping[str, str] | None = None,
             json: Any = None, body: str | bytes | None = None) -> HttpResponse:
        """Send ``method`` to the chosen server + ``path`` with a ``json`` or ``body`` body."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        return self.call(_Request(method.upper(), path, dict(headers or {}), json, data))

    def _open(self) -> None:
        self.stop()
        auth = None
        if self.credentials is not None:
            auth = (self.credentials.username, self.credentials.password)
        self._session = ItemSession.from_settings(self.adapter_settings, pool_size=self.pool_size,
                                                  hosts=len(self._targets()), auth=auth,
                                                  url_auth=self.url_credentials)

    def stop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _targets(self) -> list[str]:
        url, servers = self.adapter_settings.url, self.adapter_settings.servers
        if not servers:
            assert url, "an HTTP item without servers has a url (checked with its settings)"
            return [url]
        return [rebase(url, s) if url else s for s in servers]

    def _transmit(self, server: str, request: _Request, scope: TryScope) -> HttpResponse:
        url = join_path(server, request.path)
        response = self._send_once(request, url, scope)
        hops = 0
        while is_redirect(response.status_code):
            url, request = self._next_hop(response, url, request, server, hops)
            response = self._send_once(request, url, scope)
            hops += 1
        if response.status_code >= 400:
            raise status_error(response, self.retry_on_status, url)
        return HttpResponse(status=response.status_code, headers=dict(response.headers),
                            content=response.content)

    def _send_once(self, request: _Request, url: str, scope: TryScope) -> requests.Response:
        """One HTTP exchange; credentials go only to the origin of a configured server."""
        if self._session is None:
            raise AdapterNotReady(f"item {self.item_name!r}: the adapter is not started")
        headers = {**request.headers, **self.attempt_headers()}
        trusted = origin(url) in {origin(t) for t in self._targets()}
        return self._session.request(request.method, url, scope, headers=headers,
                                     data=request.body, json=request.json,
                                     credentials=trusted)

    def _next_hop(self, response: requests.Response, url: str, request: _Request,
                  server: str, hops: int) -> tuple[str, _Request]:
        """Where the redirect ``response`` leads and the request to send there."""
        location = response.headers.get("Location", "")
        target = urljoin(url, location)
        why = self._redirects.refusal(response.status_code, server, target, hops)
        if why is not None or not location:
            raise redirect_error(response, url, location, why or "no Location header",
                                 self.retry_on_status)
        return target, redirected(request, response.status_code)

    def _classify(self, exc: Exception, scope: TryScope, server: str) -> AdapterError | None:
        return classify_transport_error(exc, scope, server, self.response_timeout)


FOLLOWABLE = (301, 302, 303, 307, 308)


def is_redirect(status: int) -> bool:
    """A 3xx that asks to go elsewhere (every 3xx but 304 Not Modified, an answer)."""
    return 300 <= status < 400 and status != 304


@dataclass(frozen=True)
class RedirectPolicy:
    """Which redirects an item follows."""

    follow: bool
    max_hops: int
    hosts: tuple[str, ...]

    @classmethod
    def from_settings(cls, settings: HttpAdapterSettings) -> RedirectPolicy:
        """The policy an adapter's settings describe."""
        return cls(follow=settings.follow_redirects, max_hops=settings.max_redirects,
                   hosts=settings.redirect_hosts)

    def refusal(self, status: int, server: str, target: str, hops: int) -> str | None:
        """Why a redirect from ``server`` to ``target`` is not followed, or None."""
        if not self.follow:
            return "not followed (follow_redirects = false)"
        if status not in FOLLOWABLE:
            return f"not followed (only {', '.join(map(str, FOLLOWABLE))} are)"
        if hops >= self.max_hops:
            return f"not followed: more than max_redirects = {self.max_hops} redirects"
        if origin(target) == origin(server):
            return None
        if urlsplit(server).scheme == "https" and urlsplit(target).scheme != "https":
            return "refused: a redirect from https to http is never followed"
        if not self._listed(target):
            return (f"refused: {urlsplit(target).netloc or target!r} is another host, not "
                    "listed in redirect_hosts")
        return None

    def _listed(self, target: str) -> bool:
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        port = origin(target)[2]
        for entry in self.hosts:
            allowed = urlsplit("//" + entry)
            if allowed.hostname == parts.hostname and allowed.port in (None, port):
                return True
        return False


def redirected(request: _Request, status: int) -> _Request:
    """The request to send to a redirect's target (a GET without body after 303, or 301/302
    answering a POST, as browsers do)."""
    if (status == 303 and request.method != "HEAD") or (status in (301, 302)
                                                       and request.method == "POST"):
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-type"}
        return replace(request, method="GET", headers=headers, json=None, body=None)
    return request


def redirect_error(response: requests.Response, url: str, location: str, why: str,
                   retry_on_status: Collection[int]) -> HttpStatusError:
    """The error of a redirect that ends the attempt."""
    status = response.status_code
    text = f"HTTP {status} {response.reason or ''} from {url}".replace("  ", " ")
    text += retry_after_note(response.headers)
    text += f" redirects to {location}: {why}" if location else f": {why}"
    return HttpStatusError(text, code=str(status), status_code=status,
                           headers=dict(response.headers), retryable=status in retry_on_status)
