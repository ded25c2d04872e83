"""HttpOperation: sends the request body of §4 through an HttpAdapter."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters.http import HttpAdapter
from engine.host import BusinessOperation
from engine.message import Message


@dataclass
class HttpRequest(Message):
    """``{"method": "POST", "path": "/x", "headers": {}, "json": ... | "body": "..."}``."""

    method: str = "POST"
    path: str = "/"
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    body: str | None = None


@dataclass
class HttpReply(Message):
    """``{"status": 200, "headers": {...}, "body": "..."}``."""

    status: int
    headers: dict[str, str]
    body: str


class HttpOperation(BusinessOperation):
    """Calls ``url`` (or ``servers``) + ``path``; statuses ≥ 400 are failures."""

    adapter_class = HttpAdapter
    request_class = HttpRequest

    def on_message(self, request: HttpRequest) -> HttpReply:
        assert isinstance(self.adapter, HttpAdapter)
        reply = self.adapter.send(request.method, request.path, headers=request.headers,
                                  json=request.json, body=request.body)
        return HttpReply(status=reply.status, headers=dict(reply.headers), body=reply.body)
