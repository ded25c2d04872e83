"""Span names and attributes of the OpenTelemetry semantic conventions, spelled out here
because the incubating convention modules move between releases."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from engine.attempt import AttemptReport, HttpExchange

MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_MESSAGE_ID = "messaging.message.id"
MESSAGING_CONVERSATION_ID = "messaging.message.conversation_id"
MESSAGING_BATCH_COUNT = "messaging.batch.message_count"
SYSTEM = "encore"  # messaging.system: Encore's own queue

HTTP_METHOD = "http.request.method"
HTTP_METHOD_ORIGINAL = "http.request.method_original"
HTTP_RESEND_COUNT = "http.request.resend_count"
HTTP_STATUS_CODE = "http.response.status_code"
URL_FULL = "url.full"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
OTHER = "_OTHER"  # error.type / method when no better value is known

ENCORE_MESSAGE_ID = "encore.message.id"
ENCORE_ITEM = "encore.item"
ENCORE_OUTCOME = "encore.attempt.outcome"  # message_attempt.outcome
ENCORE_RESULT = "encore.delivery.result"  # how the delivery left the message

KNOWN_METHODS = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST",
                           "PUT", "TRACE"})
DEFAULT_PORTS = {"http": 80, "https": 443}
REDACTED = "REDACTED"


def client_span_name(exchange: HttpExchange | None, target: str) -> str:
    """The CLIENT span's name: the HTTP method, or ``attempt {target}`` without a request."""
    if exchange is None:
        return f"attempt {target}"
    return exchange.method if exchange.method in KNOWN_METHODS else "HTTP"


def http_attributes(exchange: HttpExchange | None, status_code: int | None) -> dict[str, Any]:
    """The HTTP attributes of an attempt's last request (credentials redacted)."""
    attributes: dict[str, Any] = {}
    if exchange is not None:
        if exchange.method in KNOWN_METHODS:
            attributes[HTTP_METHOD] = exchange.method
        else:
            attributes[HTTP_METHOD], attributes[HTTP_METHOD_ORIGINAL] = OTHER, exchange.method
        attributes.update(url_attributes(exchange.url))
        status_code = exchange.status_code or status_code
    if status_code:
        attributes[HTTP_STATUS_CODE] = status_code
    return attributes


def url_attributes(url: str) -> dict[str, Any]:
    """``url.full`` without user name and password, ``server.address``, ``server.port``."""
    parts = urlsplit(url)
    attributes: dict[str, Any] = {URL_FULL: _without_credentials(url)}
    if parts.hostname:
        attributes[SERVER_ADDRESS] = parts.hostname
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        port = None
    if port:
        attributes[SERVER_PORT] = port
    return attributes


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{REDACTED}:{REDACTED}@{host}"))


def error_type(report: AttemptReport) -> str | None:
    """``error.type`` of a failed attempt: HTTP status, qualified class name, or ``_OTHER``."""
    if report.outcome == "ok":
        return None
    status = report.status_code or (report.exchange.status_code if report.exchange else None)
    if status is not None and status >= 400:
        return str(status)
    if report.error is not None:
        return qualified_name(type(report.error))
    return OTHER


def qualified_name(cls: type) -> str:
    """``engine.errors.ResponseTimeout``: how ``error.type`` names an exception class."""
    return f"{cls.__module__}.{cls.__qualname__}"
