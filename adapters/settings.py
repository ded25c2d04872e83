"""The settings every outbound adapter accepts (docs/settings.md), declared by
:class:`AdapterSettings`, and their validators (each returns the cleaned value or raises
``ValueError``)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from adapters.urls import redact_userinfo
from engine.retry.settings import OUTCOME_SETTINGS
from engine.settings import Setting, TypedSettings, setting, shared

DEFAULT_RESPONSE_TIMEOUT = 30.0
WAIT_FOREVER = -1  # response_timeout: no deadline (Ensemble's ResponseTimeout = -1)
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_BAD_SERVER_COOLDOWN = 60.0
DEFAULT_RETRY_ON_STATUS = (429, 502, 503, 504)
DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_REDIRECTS = 5

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110)


def http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{redact_userinfo(value)!r} is not allowed; expected an http:// or "
                         "https:// URL like 'https://host:8443/path'")
    return value


def url_list(value: list[Any] | tuple[Any, ...]) -> tuple[str, ...]:
    if not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of http:// or https:// base URLs, "
                         "like ['https://a:8443', 'https://b:8443']")
    return tuple(http_url(v) for v in value)


def status_list(value: list[Any] | tuple[Any, ...]) -> tuple[int, ...]:
    if not all(type(v) is int and 100 <= v <= 599 for v in value):
        raise ValueError(f"{list(value)!r} is not allowed; expected a list of HTTP status "
                         "codes (integers 100–599), like [429, 502, 503, 504]")
    return tuple(value)


def host_list(value: list[Any] | tuple[Any, ...]) -> tuple[str, ...]:
    """Host names, each with an optional port: ``["files.example.com", "10.0.0.5:8443"]``."""
    return tuple(_host(v) for v in value)


def _host(value: Any) -> str:
    hint = ("expected a list of host names, each with an optional port, like "
            "['files.example.com', '10.0.0.5:8443'] (no scheme, no path)")
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not allowed; {hint}")
    parts = urlsplit("//" + value)
    try:
        _ = parts.port
    except ValueError:
        raise ValueError(f"{value!r} has a bad port; {hint}") from None
    if not parts.hostname or parts.path or parts.query or parts.username or "/" in value:
        raise ValueError(f"{value!r} is not allowed; {hint}")
    return value


def header_name(value: str) -> str:
    if value and not _TOKEN.match(value):
        raise ValueError(f"{value!r} is not allowed; expected an HTTP header name like "
                         "'Idempotency-Key', or \"\" for none")
    return value


def positive(value: float) -> float:
    if value <= 0:
        raise ValueError(f"{value!r} is out of range; expected a number of seconds > 0")
    return float(value)


def attempt_seconds(value: float) -> float:
    """A ``response_timeout``: seconds > 0 (-1, wait for ever, is let through before)."""
    if value == 0:
        raise ValueError("0 leaves an attempt no time at all, so nothing would ever be sent; "
                         "give the seconds an attempt may take, or -1 for no limit (wait for "
                         "ever)")
    return float(value)


def not_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a non-empty string")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class AdapterSettings(TypedSettings):
    """The settings every outbound adapter accepts: :data:`COMMON_SETTINGS`; ``None`` = not
    set."""

    response_timeout: float = setting(
        kind=float, default=DEFAULT_RESPONSE_TIMEOUT, minimum=0, allow=(WAIT_FOREVER,),
        check=attempt_seconds,
        help="seconds for a whole attempt: connect, send and the complete response; "
             "-1 = no limit (an attempt to a server that never answers holds its worker "
             "until the daemon stops)")
    connect_timeout: float = setting(
        kind=float, default=DEFAULT_CONNECT_TIMEOUT, check=positive,
        help="seconds for the connect phase (never past the deadline)")
    servers: tuple[str, ...] = setting(
        kind=(list, tuple), default=(), check=url_list,
        help="base URLs to fail over across, in order of preference")
    bad_server_cooldown: float = setting(
        kind=float, default=DEFAULT_BAD_SERVER_COOLDOWN, minimum=0,
        help="seconds a failed server is skipped; 0 = never skip")
    # declared by the retry settings, which read them too
    idempotent: bool = shared(OUTCOME_SETTINGS[0])
    on_unknown_outcome: str = shared(OUTCOME_SETTINGS[1])
    idempotency_header: str = setting(
        kind=str, default="", check=header_name,
        help='HTTP header carrying the message\'s stable key; "" = none')
    retry_on_status: tuple[int, ...] = setting(
        kind=(list, tuple), default=DEFAULT_RETRY_ON_STATUS, check=status_list,
        help="HTTP statuses that ask for a retry")
    credentials: str | None = setting(
        kind=str, default=None, check=not_empty,
        help="a credentials name, resolved from the environment or the credentials file")
    ssl_verify: bool = setting(kind=bool, default=True, help="verify TLS certificates")
    ca_bundle: str | None = setting(kind=str, default=None, check=not_empty, path=True,
                                    help="path of a PEM file of CA certificates to trust")
    client_cert: str | None = setting(
        kind=str, default=None, check=not_empty, path=True,
        help="path of a PEM client certificate (may include its key)")
    client_key: str | None = setting(kind=str, default=None, check=not_empty, path=True,
                                     help="path of the client certificate's PEM key")
    max_response_bytes: int = setting(
        kind=int, default=DEFAULT_MAX_RESPONSE_BYTES, minimum=1,
        help="bytes; a larger (decoded) response body is refused")
    proxy: str | None = setting(kind=str, default=None, check=http_url,
                                help="URL of an HTTP proxy for every request")


COMMON_SETTINGS: tuple[Setting, ...] = AdapterSettings.DECLARED
