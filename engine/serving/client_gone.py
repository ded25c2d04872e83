"""Clients that go away before their request is read: counted and logged through the repeat
filter, never a traceback each (a flood of cut bodies would write one per connection)."""
from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["client_gone", "clients_gone", "on_client_gone"]

log = logging.getLogger(__name__)

GONE_STATUS = 400

_gone = 0
_lock = threading.Lock()


def client_gone(server: str, host: str) -> Response:
    """Count a client of ``server`` gone before its request was read; the answer it would
    have had."""
    global _gone
    with _lock:
        _gone += 1
    log.warning("%s: a client (%s) went away before its request was read; such clients are "
                "counted, not answered", server, host, extra={"repeat_kind": "client gone"})
    return Response(status_code=GONE_STATUS)


def clients_gone() -> int:
    """Clients of this process's servers gone before their request was read."""
    with _lock:
        return _gone


def on_client_gone(server: str) -> Callable[[Request, Exception], Awaitable[Response]]:
    """A Starlette handler of ``ClientDisconnect`` for the app of ``server``."""
    async def gone(request: Request, exc: Exception) -> Response:
        return client_gone(server, request.client.host if request.client else "unknown")
    return gone
