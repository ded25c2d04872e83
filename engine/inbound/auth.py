"""Who calls an inbound service, and may they (docs/inbound.md).

Per service, ``auth`` is one of:

- ``none``: anyone who can connect — so only callers on loopback (127.0.0.0/8, ::1); a
  request from any other address is refused (403).
- ``basic``: HTTP Basic with a portal user (``encore user add``; every user's role is
  ``sender`` or higher), checked as the portal's login checks it
  (:meth:`engine.serving.auth.Authenticator.login`: argon2, and the failed-login limits
  counted in the database per user name and client address, and a few checks at once per
  process: 429 with ``Retry-After`` past them, :mod:`engine.serving.hash_gate`). A valid
  header is remembered for :data:`~engine.serving.auth.TOKEN_CACHE_SECONDS` by a keyed
  digest, so a caller sending many requests does not pay an argon2 hash for each.
- ``token``: ``Authorization: Bearer TOKEN`` of role ``sender`` or higher
  (``encore token create``), as the intake API checks it.

The principal (``user:NAME`` or ``token:NAME``) is the caller its ``Idempotency-Key``\\s
belong to (docs/security.md).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import secrets
import threading
import time

from engine.inbound.refusals import Refused
from engine.observe.network import is_loopback
from engine.serving.auth import (
    TOKEN_CACHE_SECONDS,
    TOKEN_CACHE_SIZE,
    Authenticator,
    AuthError,
    LoginThrottled,
)
from engine.store.sql import SqlStore

REALM = 'Basic realm="Encore", charset="UTF-8"'


class CallerAuth:
    """Checks callers against the store's users and tokens."""

    def __init__(self, store: SqlStore) -> None:
        self._auth = Authenticator(store)
        self._key = secrets.token_bytes(32)  # keys the digests of remembered Basic headers
        self._basic: dict[bytes, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def principal(self, mode: str, authorization: str | None, client: str) -> str | None:
        """The caller's principal under ``mode`` (None for ``none``); :class:`Refused`
        (401, 403, 429) naming what is missing. ``client``: the caller's host."""
        if mode == "none":
            if not is_loopback(client):
                raise Refused(403, "this service takes requests without authentication from "
                                   "loopback only; set auth = \"basic\" or \"token\" for "
                                   "callers on other machines")
            return None
        if mode == "token":
            return self._token(authorization)
        return self._basic_user(authorization, client)

    def _token(self, authorization: str | None) -> str:
        holder = self._auth.bearer(authorization)
        if holder is None:
            raise Refused(401, "a valid API token is needed: Authorization: Bearer TOKEN",
                          headers={"WWW-Authenticate": "Bearer"})
        if not holder.may("sender"):
            raise Refused(403, f"token {holder.name!r} has role {holder.role}; this needs "
                               "sender or above")
        return f"token:{holder.name}"

    def _basic_user(self, authorization: str | None, client: str) -> str:
        user, password = _basic_credentials(authorization)
        digest = hmac.new(self._key, (authorization or "").encode(), hashlib.sha256).digest()
        with self._lock:
            hit = self._basic.get(digest)
        if hit is not None and time.monotonic() - hit[0] < TOKEN_CACHE_SECONDS:
            return hit[1]
        try:
            who = self._auth.login(user, password, client)
        except LoginThrottled as exc:
            raise Refused(429, str(exc),
                          headers={"Retry-After": str(math.ceil(exc.retry_after) or 1)}) \
                from exc
        except AuthError as exc:
            raise Refused(401, f"HTTP Basic: {exc}", headers={"WWW-Authenticate": REALM}) \
                from exc
        if not who.may("sender"):
            raise Refused(403, f"user {who.name!r} has role {who.role}; this needs sender or "
                               "above")
        principal = f"user:{who.name}"
        with self._lock:
            if len(self._basic) >= TOKEN_CACHE_SIZE:
                self._basic.clear()
            self._basic[digest] = (time.monotonic(), principal)
        return principal


def _basic_credentials(authorization: str | None) -> tuple[str, str]:
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        raise Refused(401, "HTTP Basic authentication is needed: Authorization: Basic "
                           "base64(user:password)", headers={"WWW-Authenticate": REALM})
    try:
        text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise Refused(401, "Authorization: Basic must hold base64 of user:password in UTF-8",
                      headers={"WWW-Authenticate": REALM}) from exc
    user, colon, password = text.partition(":")
    if not colon or not user:
        raise Refused(401, "Authorization: Basic must hold base64 of user:password",
                      headers={"WWW-Authenticate": REALM})
    return user, password
