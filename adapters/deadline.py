"""A true deadline for one HTTP exchange (docs/retries.md rule 1).

urllib3 timeouts are per socket operation, so a trickling server never trips them: inside a
:func:`try_scope` every socket read and write first sets its timeout to the time left. The
scope also records whether any byte was written (``sent``), which tells *not sent* from
*outcome unknown*. Nothing global is patched.
"""
from __future__ import annotations

import http.client
import io
import math
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from engine.attempt import HttpExchange

# seconds: a socket timeout cannot be math.inf
MAX_SOCKET_WAIT = 1e9


def attempt_deadline(start: float, response_timeout: float) -> float:
    """The deadline of an attempt begun at ``start``; ``math.inf`` for a timeout of -1."""
    return math.inf if response_timeout < 0 else start + response_timeout


class DeadlineExceeded(TimeoutError):
    """No time left before the attempt's deadline (urllib3 treats it as a read timeout)."""


@dataclass
class TryScope:
    """One try of one server inside an attempt: its deadline and whether the request left."""

    deadline: float
    monotonic: Callable[[], float]
    sent: bool = False
    status_code: int | None = None
    headers: dict[str, str] | None = None
    exchange: HttpExchange | None = None

    def remaining(self) -> float:
        """Seconds left before the deadline; ≤ 0 when it has passed."""
        return self.deadline - self.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def time_left(self) -> float:
        """Seconds left (at most :data:`MAX_SOCKET_WAIT`), or raise DeadlineExceeded."""
        left = self.remaining()
        if left <= 0:
            raise DeadlineExceeded("the attempt's deadline has passed")
        return min(left, MAX_SOCKET_WAIT)


_local = threading.local()


@contextmanager
def try_scope(deadline: float, monotonic: Callable[[], float]) -> Iterator[TryScope]:
    """Bind a :class:`TryScope` to this thread for requests made inside the block."""
    scope = TryScope(deadline=deadline, monotonic=monotonic)
    previous = getattr(_local, "scope", None)
    _local.scope = scope
    try:
        yield scope
    finally:
        _local.scope = previous


def current_scope() -> TryScope | None:
    """The scope bound to this thread, if any."""
    return getattr(_local, "scope", None)


class _DeadlineSocketIO(socket.SocketIO):
    """A socket reader that sets the socket timeout to the time left before every read."""

    def __init__(self, sock: socket.socket, scope: TryScope) -> None:
        super().__init__(sock, "rb")
        self._timed = sock
        self._scope = scope

    def readinto(self, b: Any) -> int | None:
        self._timed.settimeout(self._scope.time_left())
        return super().readinto(b)


class _DeadlineSocket:
    """The socket ``http.client.HTTPResponse`` gets: its ``makefile`` reads under the deadline."""

    def __init__(self, sock: socket.socket, scope: TryScope) -> None:
        self._sock = sock
        self._scope = scope

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        raw = _DeadlineSocketIO(self._sock, self._scope)
        # as socket.makefile does: the file keeps the descriptor alive
        self._sock._io_refs += 1  # type: ignore[attr-defined]
        return io.BufferedReader(raw)


class _DeadlineHTTPResponse(http.client.HTTPResponse):
    def __init__(self, sock: Any, debuglevel: int = 0, method: str | None = None,
                 url: str | None = None) -> None:
        scope = current_scope()
        if scope is not None:
            sock = _DeadlineSocket(sock, scope)
        super().__init__(sock, debuglevel, method, url)


class _DeadlineConnectionMixin:
    """Marks the scope ``sent`` on the first write and bounds every write by the deadline."""

    response_class: type[http.client.HTTPResponse] = _DeadlineHTTPResponse
    sock: socket.socket | None
    _in_connect = False

    def connect(self) -> None:
        self._in_connect = True
        try:
            super().connect()  # type: ignore[misc]
        finally:
            self._in_connect = False

    def send(self, data: Any) -> None:
        scope = current_scope()
        if scope is not None and not self._in_connect:
            if self.sock is None:  # connect first, so a connect failure stays "not sent"
                self.connect()
            assert self.sock is not None
            self.sock.settimeout(scope.time_left())
            scope.sent = True
        super().send(data)  # type: ignore[misc]


class DeadlineHTTPConnection(_DeadlineConnectionMixin, HTTPConnection):
    pass


class DeadlineHTTPSConnection(_DeadlineConnectionMixin, HTTPSConnection):
    pass


class DeadlineHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = DeadlineHTTPConnection


class DeadlineHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = DeadlineHTTPSConnection

    def _validate_conn(self, conn: Any) -> None:
        # no urllib3 warning per unverified request: start() warns once
        HTTPConnectionPool._validate_conn(self, conn)
        if conn.is_closed:
            conn.connect()


_POOL_CLASSES = {"http": DeadlineHTTPConnectionPool, "https": DeadlineHTTPSConnectionPool}


class DeadlineHTTPAdapter(HTTPAdapter):
    """A ``requests`` transport adapter whose connections honour :class:`TryScope`."""

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False,
                         **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOL_CLASSES)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = dict(_POOL_CLASSES)
        return manager
