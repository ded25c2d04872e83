"""The item's own HTTP client: one session per item, requests bounded by the attempt's
deadline and a size limit, and the one mapping of transport exceptions to Encore's errors."""
from __future__ import annotations

import http.client
import re
import ssl
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import requests
import requests.auth
import urllib3.exceptions
from requests.structures import CaseInsensitiveDict

from adapters.deadline import DeadlineExceeded, DeadlineHTTPAdapter, TryScope
from adapters.decoding import BodyDecoder
from adapters.urls import UrlCredentials, origin
from engine.attempt import HttpExchange
from engine.errors import (
    AdapterError,
    ConnectFailed,
    ConnectionReset,
    HttpStatusError,
    ResponseRejected,
    ResponseTimeout,
)

if TYPE_CHECKING:
    from adapters.settings import AdapterSettings

CHUNK_BYTES = 16 * 1024
SNIPPET_CHARS = 200

_CHARSET = re.compile(r'charset\s*=\s*"?([^";\s]+)', re.IGNORECASE)


class ItemSession:
    """One item's connections, TLS and proxy settings; a request never waits for a free
    connection (the wait would count against the deadline)."""

    def __init__(self, *, pool_size: int, hosts: int = 1, connect_timeout: float,
                 max_response_bytes: int, ssl_verify: bool, ca_bundle: str | None = None,
                 client_cert: str | None = None, client_key: str | None = None,
                 proxy: str | None = None, auth: tuple[str, str] | None = None,
                 url_auth: UrlCredentials | None = None) -> None:
        self.connect_timeout = connect_timeout
        # URL credentials by origin: sent when ``auth`` gives none, as requests would
        self.url_auth = {o: (c.username, c.password) for o, c in (url_auth or {}).items()}
        self.max_response_bytes = max_response_bytes
        self.requests = requests.Session()
        self.requests.trust_env = False  # the item's settings decide, not the process env
        adapter = DeadlineHTTPAdapter(pool_connections=max(hosts, 1),
                                      pool_maxsize=max(pool_size, 1), pool_block=False)
        self.requests.mount("http://", adapter)
        self.requests.mount("https://", adapter)
        self.requests.verify = ca_bundle if (ssl_verify and ca_bundle) else ssl_verify
        if client_cert:
            self.requests.cert = (client_cert, client_key) if client_key else client_cert
        if proxy:
            self.requests.proxies = {"http": proxy, "https": proxy}
        if auth is not None:
            self.requests.auth = auth

    @classmethod
    def from_settings(cls, settings: AdapterSettings, *, pool_size: int, hosts: int = 1,
                      auth: tuple[str, str] | None = None,
                      url_auth: UrlCredentials | None = None) -> ItemSession:
        """The session an adapter's settings describe."""
        return cls(pool_size=pool_size, hosts=hosts, connect_timeout=settings.connect_timeout,
                   max_response_bytes=settings.max_response_bytes,
                   ssl_verify=settings.ssl_verify, ca_bundle=settings.ca_bundle,
                   client_cert=settings.client_cert, client_key=settings.client_key,
                   proxy=settings.proxy, auth=auth, url_auth=url_auth)

    def request(self, method: str, url: str, scope: TryScope, *,
                headers: Mapping[str, str] | None = None, data: Any = None, json: Any = None,
                allow_redirects: bool = False, credentials: bool = True) -> requests.Response:
        """Send a request and read the whole body before ``scope``'s deadline.

        ``credentials=False`` strips ``Authorization`` and ``Cookie``. Raises
        :class:`ResponseRejected` past ``max_response_bytes``."""
        connect = min(self.connect_timeout, scope.time_left())
        scope.exchange = HttpExchange(method, url)
        session = self.requests
        response = session.send(
            self._prepare(method, url, headers, data, json, credentials), stream=True,
            timeout=(connect, scope.time_left()), allow_redirects=allow_redirects,
            verify=session.verify, cert=session.cert, proxies=session.proxies)
        scope.status_code, scope.headers = response.status_code, dict(response.headers)
        scope.exchange = HttpExchange(method, url, response.status_code)
        try:
            body = read_body(response, self.max_response_bytes, scope.time_left)
        finally:
            response.close()
        response._content = body
        response._content_consumed = True
        return response

    def _prepare(self, method: str, url: str, headers: Mapping[str, str] | None, data: Any,
                 json: Any, credentials: bool) -> requests.PreparedRequest:
        """The request ``requests.Session.request`` would prepare, without its general
        setting merge (a tenth of a SOAP call's CPU)."""
        session = self.requests
        merged = CaseInsensitiveDict(session.headers)
        merged.update(headers or {})
        auth: Any = session.auth if credentials else _WITHOUT_CREDENTIALS
        if auth is None and self.url_auth:
            auth = self.url_auth.get(origin(url))
        prepared = requests.PreparedRequest()
        prepared.prepare(method=method.upper(), url=url, data=data or {}, json=json,
                         headers={k: v for k, v in merged.items() if v is not None},
                         auth=auth, cookies=session.cookies)
        return prepared

    def close(self) -> None:
        self.requests.close()


class _WithoutCredentials(requests.auth.AuthBase):
    """Takes the credentials out of a prepared request (auth runs after headers and cookies)."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        for name in ("Authorization", "Cookie"):
            request.headers.pop(name, None)
        return request


_WITHOUT_CREDENTIALS = _WithoutCredentials()


def read_body(response: requests.Response, limit: int,
              check: Callable[[], object] = lambda: None) -> bytes:
    """The decoded body, at most ``limit`` bytes, calling ``check()`` (the deadline) before
    each step so decompression counts against it."""
    declared = response.headers.get("Content-Length", "")
    has_body = response.request.method != "HEAD"
    if has_body and declared.isdigit() and int(declared) > limit:
        raise ResponseRejected(
            f"response refused: Content-Length {declared} exceeds max_response_bytes {limit}")
    parts: list[bytes] = []
    total = 0
    for chunk in _decoded(response, check):
        total += len(chunk)
        if total > limit:
            raise ResponseRejected(
                f"response refused: body exceeds max_response_bytes {limit}")
        parts.append(chunk)
    return b"".join(parts)


def _decoded(response: requests.Response, check: Callable[[], object]) -> Iterator[bytes]:
    """The body's bytes with its ``Content-Encoding`` undone."""
    decoder = BodyDecoder.for_header(response.headers.get("Content-Encoding", ""), check)
    if decoder is None:
        for chunk in response.raw.stream(CHUNK_BYTES, decode_content=True):
            check()
            yield chunk
        return
    for raw in response.raw.stream(CHUNK_BYTES, decode_content=False):
        yield from decoder.feed(raw)


def status_error(response: requests.Response, retry_on_status: Collection[int],
                 url: str) -> HttpStatusError:
    """An :class:`HttpStatusError` for a response with status ≥ 400."""
    status = response.status_code
    snippet = text_of(response)[:SNIPPET_CHARS].strip()
    text = f"HTTP {status} {response.reason or ''} from {url}".replace("  ", " ")
    text += retry_after_note(response.headers)
    if snippet:
        text += f": {snippet}"
    return HttpStatusError(text, code=str(status), status_code=status,
                           headers=dict(response.headers), retryable=status in retry_on_status)


def retry_after_note(headers: Mapping[str, str] | None) -> str:
    """`` (Retry-After: V)`` for an error's text, or "" without the header."""
    for name, value in (headers or {}).items():
        if str(name).lower() == "retry-after":
            shown = str(value).strip()
            if len(shown) > SNIPPET_CHARS:
                shown = shown[:SNIPPET_CHARS] + "…"
            return f" (Retry-After: {shown})"
    return ""


def text_of(response: requests.Response) -> str:
    """The body as text: the declared charset, else UTF-8; undecodable bytes replaced."""
    return lossy_text(response.content, response.headers.get("Content-Type", ""))


def lossy_text(content: bytes, content_type: str) -> str:
    """``content`` decoded with its declared charset (else UTF-8), bad bytes replaced."""
    charset = declared_charset(content_type) or "utf-8"
    try:
        return content.decode(charset, errors="replace")
    except LookupError:
        return content.decode("utf-8", errors="replace")


def exact_text(content: bytes, content_type: str) -> str | None:
    """``content`` as text if it is textual (or declares a charset) and decodes cleanly,
    else None."""
    if not content:
        return ""
    charset = declared_charset(content_type)
    if charset is None and not is_textual(content_type):
        return None
    try:
        return content.decode(charset or "utf-8")
    except (LookupError, UnicodeDecodeError):
        return None


def is_textual(content_type: str) -> bool:
    """True for ``text/*``, JSON and XML media types (``+json`` and ``+xml`` included)."""
    media = content_type.split(";", 1)[0].strip().lower()
    return (media.startswith("text/") or media in ("application/json", "application/xml")
            or media.endswith(("+json", "+xml")))


def declared_charset(content_type: str) -> str | None:
    """The ``charset`` parameter of a Content-Type value, or None."""
    match = _CHARSET.search(content_type)
    return match.group(1) if match else None


_TRANSPORT_ERRORS = (requests.RequestException, urllib3.exceptions.HTTPError,
                     http.client.HTTPException, OSError)


def classify_transport_error(exc: BaseException, scope: TryScope, url: str,
                             response_timeout: float) -> AdapterError | None:
    """Encore's error for a transport exception (ConnectFailed before anything was sent,
    else ResponseTimeout or ConnectionReset), or None if ``exc`` is not one."""
    if not isinstance(exc, _TRANSPORT_ERRORS):
        return None
    reason = describe(exc)
    if not scope.sent or _is_tls_refusal(exc):
        return ConnectFailed(f"could not connect to {url}: {reason}")
    if scope.expired() or _is_timeout(exc):
        return ResponseTimeout(
            f"no complete response from {url} within the response timeout "
            f"of {response_timeout:g} seconds")
    return ConnectionReset(f"connection to {url} broke after the request was sent: {reason}")


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps: causes, contexts, urllib3 reasons, requests' first arg."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop(0)
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        inner = item.args[0] if item.args and isinstance(item.args[0], BaseException) else None
        todo += [getattr(item, "reason", None) if isinstance(getattr(item, "reason", None),
                                                            BaseException) else None,
                 inner, item.__cause__, item.__context__]
    return seen


def _is_tls_refusal(exc: BaseException) -> bool:
    """A TLS alert (with TLS 1.3 a refused client certificate shows only after the send)."""
    return any(isinstance(e, ssl.SSLError) and "ALERT" in str(getattr(e, "reason", ""))
               for e in _chain(exc))


def _is_timeout(exc: BaseException) -> bool:
    timeouts = (TimeoutError, requests.Timeout, urllib3.exceptions.TimeoutError)
    return any(isinstance(e, timeouts) for e in _chain(exc))


def describe(exc: BaseException) -> str:
    """A short reason: the innermost cause's text, without urllib3's pool preamble."""
    chain = _chain(exc)
    for item in reversed(chain):
        if isinstance(item, DeadlineExceeded):
            return str(item)
    root = chain[-1]
    text = str(root) or type(root).__name__
    if ": " in text and "Connection" in text.split(": ", 1)[0]:  # "<HTTPConnection ...>: x"
        text = text.split(": ", 1)[1]
    return text

