"""Clients that go away before their request is read: counted, not traced (docs/security.md:
"repeated failures are logged once per kind and minute with a count").

A client that closes its connection in the middle of its body makes Starlette raise
``ClientDisconnect`` where the body is read. That is the client's doing, not a fault of the
server's: answered as an unexpected error, a flood of slow bodies cut short wrote a traceback
per connection (13,644 in 90 s). The portal and the inbound services answer it with
:func:`client_gone`: the process's count (:func:`clients_gone`) grows by one and a WARNING
goes to the log, which the process's repeat filter lets through once a minute with the count
of the others (:mod:`engine.observe.logs`). The answer itself goes nowhere.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["client_gone", "clients_gone", "on_client_gone"]

log = logging.getLogger(__name__)

GONE_STATUS = 400  # what a gone client would be answered, if it were there to read it

_gone = 0
_lock = threading.Lock()


def client_gone(server: str, host: str) -> Response:
    """Count a client of ``server`` (a service's name, or "portal") from ``host`` that went
    away before its request was read; the answer it would have had."""
    global _gone
    with _lock:
        _gone += 1
    log.warning("%s: a client (%s) went away before its request was read; such clients are "
                "counted, not answered", server, host, extra={"repeat_kind": "client gone"})
    return Response(status_code=GONE_STATUS)


def clients_gone() -> int:
    """Clients of this process's servers gone before their request was read, since its
    start."""
    with _lock:
        return _gone


def on_client_gone(server: str) -> Callable[[Request, Exception], Awaitable[Response]]:
    """A Starlette handler of ``ClientDisconnect`` for the app of ``server``."""
    async def gone(request: Request, exc: Exception) -> Response:
        return client_gone(server, request.client.host if request.client else "unknown")
    return gone
