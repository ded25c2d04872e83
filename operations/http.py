"""HttpOperation: sends the request body of docs/settings.md through an HttpAdapter."""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from adapters.http import HttpAdapter, HttpResponse
from engine.errors import MessageError
from engine.host import BusinessOperation
from engine.message import Message


@dataclass
class HttpRequest(Message):
    """``{"method", "path", "headers"}`` and at most one of ``json``, ``body`` (text, sent as
    UTF-8) and ``body_base64`` (exact bytes)."""

    method: str = "POST"
    path: str = "/"
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    body: str | None = None
    body_base64: str | None = None

    def __post_init__(self) -> None:
        given = [n for n in ("json", "body", "body_base64") if getattr(self, n) is not None]
        if len(given) > 1:
            raise MessageError(f"HttpRequest: give one of json, body and body_base64, "
                               f"not {' and '.join(given)}")
        if self.body_base64 is not None:
            self.payload()  # refuse bad base64 when the message is sent, not when delivered

    def payload(self) -> str | bytes | None:
        """The body to send: ``body`` as it is, or ``body_base64`` decoded."""
        if self.body_base64 is None:
            return self.body
        try:
            return base64.b64decode(self.body_base64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MessageError(f"HttpRequest: body_base64 is not valid base64: {exc}") from exc


@dataclass
class HttpReply(Message):
    """``{"status", "headers", "body"}``, or ``"body_base64"`` for a response that is not text."""

    status: int
    headers: dict[str, str]
    body: str | None = None
    body_base64: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data.pop("body" if self.body_base64 is not None else "body_base64")
        return data

    @classmethod
    def of(cls, reply: HttpResponse) -> HttpReply:
        """The reply for ``reply``: its text when it is text, else its bytes in base64."""
        text = reply.exact_text
        if text is not None:
            return cls(status=reply.status, headers=dict(reply.headers), body=text)
        return cls(status=reply.status, headers=dict(reply.headers),
                   body_base64=base64.b64encode(reply.content).decode("ascii"))


class HttpOperation(BusinessOperation):
    """Calls ``url`` (or ``servers``) + ``path``; statuses ≥ 400 are failures."""

    adapter_class = HttpAdapter
    request_class = HttpRequest

    def on_message(self, request: HttpRequest) -> HttpReply:
        assert isinstance(self.adapter, HttpAdapter)
        reply = self.adapter.send(request.method, request.path, headers=request.headers,
                                  json=request.json, body=request.payload())
        return HttpReply.of(reply)
