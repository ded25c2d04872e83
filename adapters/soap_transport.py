"""The zeep transport of a :class:`~adapters.soap.SoapAdapter` and where its WSDL documents
may come from.

Every POST goes through the item's session; the WSDL and its imports load only as
:class:`DocumentPolicy` allows, each held to the item's XML limits (docs/security.md).
"""
from __future__ import annotations

import dataclasses
import os
import stat
import sys
from collections.abc import Callable, Collection, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit
from urllib.request import url2pathname

import requests
import requests.auth
import zeep

from adapters.deadline import current_scope, try_scope
from adapters.session import ItemSession, status_error
from adapters.xml_guard import XmlLimitExceeded, XmlLimits, check_xml
from engine.errors import DocumentRefused, ResponseRejected

__all__ = ["AttemptHooks", "DeadlineTransport", "DocumentPolicy", "HostBoundBasicAuth", "Origin",
           "local_path", "origin_of"]

MAX_WSDL_REDIRECTS = 5
WSDL_TOTAL_BYTES = 64 * 1024 * 1024  # bytes: all documents of one WSDL load together
NEVER_READ = ("/dev", "/proc", "/sys")  # directories no WSDL document is read from

Origin = tuple[str, str, int]  # scheme, host (lower case), port
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> Origin | None:
    """``(scheme, host, port)`` of an http(s) URL; None for any other URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # a port that is not a number
        return None
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname, port or _DEFAULT_PORTS[scheme]


def _origin_text(origin: Origin) -> str:
    return f"{origin[0]}://{origin[1]}:{origin[2]}"


@dataclass(frozen=True)
class DocumentPolicy:
    """Where the documents of one WSDL may be read from: its own scheme, host and port, or
    regular files under a local WSDL's directory."""

    origin: Origin | None
    wsdl_file: str | None
    limit: int  # bytes, one document

    @classmethod
    def for_wsdl(cls, wsdl: str, limit: int) -> DocumentPolicy:
        origin = origin_of(wsdl)
        path = None if origin else local_path(wsdl)
        return cls(origin=origin, limit=limit,
                   wsdl_file=os.path.realpath(path) if path is not None else None)

    @property
    def directory(self) -> str | None:
        """The real directory whose files a local WSDL may import; None for an http(s) one."""
        return os.path.dirname(self.wsdl_file) if self.wsdl_file else None

    def check_remote(self, url: str) -> None:
        """Raise :class:`DocumentRefused` unless ``url`` may be fetched over http(s)."""
        origin = origin_of(url)
        if self.origin is None:
            raise DocumentRefused(url, "a local WSDL may import only files under its "
                                       f"directory {self.directory}, no URL")
        if origin != self.origin:
            raise DocumentRefused(url, "an import from another host than the WSDL's "
                                       f"({_origin_text(self.origin)}): documents are loaded "
                                       "only from the WSDL's own scheme, host and port")

    def check_redirect(self, url: str, location: str) -> str:
        """The absolute target of a redirect from ``url``, if it stays on the WSDL's origin."""
        target = urljoin(url, location)
        if origin_of(target) != self.origin:
            raise DocumentRefused(url, f"it redirects to {target}, off the WSDL's own scheme, "
                                       "host and port; not followed: WSDL documents (and "
                                       "credentials) stay there")
        return target

    def check_local(self, url: str) -> str:
        """The real path of the local document ``url``, if the policy allows reading it."""
        path = local_path(url)
        scheme = urlsplit(url).scheme.lower()
        if path is None and scheme in _DEFAULT_PORTS:
            raise DocumentRefused(url, "not a valid http(s) URL")
        if path is None:
            raise DocumentRefused(url, f"the URL scheme {scheme or '(none)'!r} is not allowed; "
                                       "documents are loaded only over http or https")
        if self.wsdl_file is None:
            raise DocumentRefused(url, "a local file: a WSDL loaded over http(s) may import "
                                       "only from its own host, never local files")
        real = os.path.realpath(path)
        if any(_is_under(real, d) for d in NEVER_READ):
            raise DocumentRefused(url, f"{real} is under {', '.join(NEVER_READ)}, which are "
                                       "never read")
        if real != self.wsdl_file and not _is_under(real, str(self.directory)):
            raise DocumentRefused(url, f"{real} is outside the WSDL's directory "
                                       f"{self.directory}")
        if not stat.S_ISREG(os.stat(real).st_mode):  # stat, not open: a device may act on open
            raise DocumentRefused(url, f"{real} is not a regular file")
        return real


def local_path(url: str) -> str | None:
    """The path a ``file:`` URL or a plain path names; None for any other URL."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            return None
        return url2pathname(unquote(parts.path))
    if parts.scheme or not url:
        return None
    return os.path.abspath(url)  # relative to the working directory, as zeep takes it


def _is_under(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def read_local(url: str, path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file ``path``, else :class:`DocumentRefused`."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(path, flags), "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # swapped since the check
            raise DocumentRefused(url, f"{path} is not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise DocumentRefused(url, f"larger than max_response_bytes {limit}")
    return data


class HostBoundBasicAuth(requests.auth.HTTPBasicAuth):
    """HTTP Basic credentials sent only to ``origins``."""

    def __init__(self, username: str, password: str, origins: Collection[Origin]) -> None:
        super().__init__(username, password)
        self.origins = frozenset(origins)

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        if origin_of(request.url or "") in self.origins:
            return super().__call__(request)
        return request


@dataclass(frozen=True)
class AttemptHooks:
    """What the transport needs of its adapter."""

    deadline: Callable[[], float]
    headers: Callable[[], Mapping[str, str]]
    retry_on_status: Collection[int]
    monotonic: Callable[[], float]
    response_timeout: float
    xml_limits: XmlLimits = dataclasses.field(default_factory=XmlLimits.defaults)


class DeadlineTransport(zeep.Transport):
    """Sends through the item's :class:`~adapters.session.ItemSession`; loads documents only
    as ``policy`` allows."""

    def __init__(self, hooks: AttemptHooks, session: ItemSession,
                 policy: DocumentPolicy) -> None:
        super().__init__(session=session.requests, timeout=hooks.response_timeout,
                         operation_timeout=hooks.response_timeout)
        session.requests.adapters.pop("file://", None)  # zeep mounts a file reader
        self._hooks = hooks
        self._item_session = session
        self._policy = policy
        self._loaded_bytes = 0

    def post(self, address: str, message: Any, headers: Mapping[str, str]) -> requests.Response:
        """One SOAP call under the deadline; a status ≥ 400 that cannot be a fault raises."""
        with self._scope() as scope:
            response = self._item_session.request(
                "POST", address, scope, data=message,
                headers={**headers, **self._hooks.headers()})
        if response.status_code >= 400 and not _may_be_fault(response):
            raise status_error(response, self._hooks.retry_on_status, address)
        return self._checked(address, response)

    def get(self, address: str, params: Any, headers: Mapping[str, str]) -> requests.Response:
        with self._scope() as scope:
            response = self._item_session.request("GET", address, scope, headers=headers)
        return self._checked(address, response)

    def _checked(self, address: str, response: requests.Response) -> requests.Response:
        """``response``, or ResponseRejected when its XML exceeds the item's limits."""
        try:
            check_xml(response.content, self._hooks.xml_limits)
        except XmlLimitExceeded as exc:
            raise ResponseRejected(f"response from {address} (HTTP {response.status_code}) "
                                   f"refused: {exc}") from exc
        return response

    def load(self, url: str) -> bytes:
        """A WSDL or schema document, checked against the policy before anything is read."""
        if origin_of(url) is not None:
            self._policy.check_remote(url)
            content = self._fetch(url)
        else:
            content = read_local(url, self._policy.check_local(url), self._policy.limit)
        try:
            check_xml(content, dataclasses.replace(self._hooks.xml_limits,
                                                   xml_max_elements=sys.maxsize))
        except XmlLimitExceeded as exc:
            raise DocumentRefused(url, str(exc)) from exc
        self._loaded_bytes += len(content)
        total = max(WSDL_TOTAL_BYTES, self._policy.limit)
        if self._loaded_bytes > total:
            raise DocumentRefused(url, f"the WSDL and its imports together exceed {total} "
                                       "bytes")
        return content

    def _fetch(self, url: str) -> bytes:
        for _ in range(MAX_WSDL_REDIRECTS + 1):
            with self._scope() as scope:
                try:
                    response = self._item_session.request("GET", url, scope)
                except ResponseRejected as exc:
                    raise DocumentRefused(url, f"larger than max_response_bytes "
                                               f"{self._policy.limit}") from exc
            if not response.is_redirect:
                response.raise_for_status()
                return response.content
            url = self._policy.check_redirect(url, response.headers["Location"])
        raise DocumentRefused(url, f"more than {MAX_WSDL_REDIRECTS} redirects")

    def _scope(self) -> Any:
        """The scope in force, else one ending at the current attempt's deadline."""
        scope = current_scope()
        if scope is not None:
            return nullcontext(scope)
        return try_scope(self._hooks.deadline(), self._hooks.monotonic)


def _may_be_fault(response: requests.Response) -> bool:
    """SOAP faults come as 500 (SOAP 1.1 and 1.2) or 400 (SOAP 1.2 Sender), in XML."""
    kind = response.headers.get("Content-Type", "").lower()
    return response.status_code in (400, 500) and "xml" in kind and bool(response.content)
