"""Credentials written in an item's URL (docs/security.md): taken out of the URL when the
adapter is made, so no URL it shows or stores has them, and sent as HTTP Basic to that URL's
origin only.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from adapters.credentials import Credentials

__all__ = ["URL_KEYS", "Origin", "UrlCredentials", "origin", "redact_userinfo",
           "split_userinfo", "take_url_credentials", "url_credentials_warning"]

URL_KEYS = ("url", "wsdl", "servers")
URL_CREDENTIALS_NAME = "(written in the URL)"

Origin = tuple[str, str, int | None]
UrlCredentials = dict[Origin, Credentials]

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>]*@")


def origin(url: str) -> Origin:
    """(scheme, host, port) of ``url``, the port made explicit for http and https."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port if port is not None else default


def redact_userinfo(text: str) -> str:
    """``text`` with the user name and password of every URL in it replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", text) if "@" in text else text


def split_userinfo(url: str) -> tuple[str, Credentials | None]:
    """An http(s) ``url`` without its ``user:password@``, and those credentials or None."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    clean = urlunsplit(parts._replace(netloc=host))
    return clean, Credentials(username=unquote(user), password=unquote(password),
                              name=URL_CREDENTIALS_NAME)


def take_url_credentials(settings: Mapping[str, Any]
                         ) -> tuple[dict[str, Any], UrlCredentials, list[str]]:
    """``settings`` with URL credentials taken out; those credentials by origin; the keys
    that had some."""
    clean, found, keys = dict(settings), UrlCredentials(), []
    for key in URL_KEYS:
        value = settings.get(key)
        urls = value if isinstance(value, (list, tuple)) else [value]
        stripped = []
        for url in urls:
            if not isinstance(url, str):
                stripped.append(url)
                continue
            bare, credentials = split_userinfo(url)
            if credentials is not None:
                found.setdefault(origin(bare), credentials)
                if key not in keys:
                    keys.append(key)
            stripped.append(bare)
        if key in settings:
            clean[key] = type(value)(stripped) if isinstance(value, (list, tuple)) \
                else stripped[0]
    return clean, found, keys


def url_credentials_warning(item: str, keys: list[str]) -> str:
    """The ``Warning`` at start for an item whose ``keys`` held credentials in a URL."""
    where = " and ".join(keys)
    return (f"item {item!r}: {where} holds a user name and password in its URL; they are "
            "sent to that host but never shown or stored (the URL is redacted everywhere); "
            "set credentials = \"<name>\" instead (ENCORE_CREDENTIALS_<NAME>_USERNAME and "
            "_PASSWORD, or the file named by ENCORE_CREDENTIALS_FILE)")
