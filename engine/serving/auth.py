"""Who is asking, and may they: roles, passwords, API tokens and login limits, shared by the
portal and the inbound services (docs/security.md).

API tokens are stored as their SHA-256: 256 random bits need no slow hash, and the digest
can be looked up by an index. Login attempts are counted in the database before the
password is checked, so the limit holds across portals however many attempts race.
"""
from __future__ import annotations

import functools
import hashlib
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from engine.clock import utcnow
from engine.errors import EncoreError
from engine.serving.hash_gate import HashGate, HashGateBusy, process_gate
from engine.store import accounts
from engine.store.sql import SqlStore

ROLE_RANK = {"sender": 0, "viewer": 1, "operator": 2, "admin": 3}
LOGIN_FAILURES = 5  # login attempts allowed per user name or address in LOGIN_WINDOW
LOGIN_WINDOW = 300.0  # seconds
MAX_KEY_TEXT = 200
TOKEN_PREFIX = "enc_"
# a revoked token is refused everywhere at most this many seconds after
TOKEN_CACHE_SECONDS = 1.0
TOKEN_CACHE_SIZE = 10_000


class AuthError(EncoreError):
    """Base of the refusals below; the text is safe to show."""


class NotAuthenticated(AuthError):
    """No valid session or token (HTTP 401; pages redirect to /login)."""


class Forbidden(AuthError):
    """Known, but the role is too low or the CSRF token is wrong (HTTP 403)."""


class LoginThrottled(AuthError):
    """Too many failed logins (HTTP 429, ``Retry-After``)."""

    WHAT = "too many failed logins"

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"{self.WHAT}; try again in {retry_after:.0f} s")
        self.retry_after = retry_after


class LoginBusy(LoginThrottled):
    """Too many password checks at once in this process (HTTP 429); not counted."""

    WHAT = "too many logins at once"


@dataclass(frozen=True)
class Principal:
    """A logged-in user (``kind`` "user") or an API token's holder (``kind`` "token")."""

    name: str
    role: str
    kind: str
    csrf: str = ""
    generation: int = 0  # a user's session generation when the session began
    time_zone: str = "UTC"  # how the user reads times: "UTC" or "local" (the browser's)

    def may(self, role: str) -> bool:
        """True if this principal's role is ``role`` or above it."""
        return ROLE_RANK.get(self.role, -1) >= ROLE_RANK[role]

    def require(self, role: str) -> None:
        if not self.may(role):
            raise Forbidden(f"{self.kind} {self.name!r} has role {self.role}; this needs "
                            f"{role} or above")


# -- secrets and hashes ----------------------------------------------------------------
_hasher = PasswordHasher()


@functools.cache
def _dummy_hash() -> str:
    """A hash verified for a login naming no user, so it takes as long as a wrong password."""
    return _hasher.hash(secrets.token_hex(8))


def hash_password(password: str) -> str:
    """The argon2 hash of ``password``, in a hash-gate slot (LoginBusy if none)."""
    if not password:
        raise AuthError("the password is empty")
    try:
        with process_gate().slot():
            return _hasher.hash(password)
    except HashGateBusy as exc:
        raise LoginBusy(exc.retry_after) from exc


def new_token() -> str:
    """A new API token: 256 random bits, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """What is stored of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


# -- login limits ------------------------------------------------------------------------
def limit_key(kind: str, value: str) -> str:
    """The key a login limit counts under: ``kind:value``, a long value by its digest."""
    if len(value) > MAX_KEY_TEXT:
        value = "sha256:" + hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()
    return f"{kind}:{value}"


class StoredLoginLimiter:
    """Counts login attempts per key in the database, shared by every portal:
    :meth:`guess` counts one or raises LoginThrottled."""

    def __init__(self, store: SqlStore, *, failures: int = LOGIN_FAILURES,
                 window: float = LOGIN_WINDOW,
                 now: Callable[[], datetime] | None = None) -> None:
        self.store = store
        self.failures, self.window = failures, timedelta(seconds=window)
        self._now = now or utcnow
        self._purged: datetime | None = None

    def guess(self, keys: Sequence[str]) -> None:
        now = self._now()
        if self._purged is None or now - self._purged > self.window:
            self._purged = now
            accounts.purge_login_guesses(self.store, before=now - self.window)
        spent = accounts.count_login_guess(self.store, keys, now=now, limit=self.failures,
                                           window=self.window)
        if spent is not None:
            raise LoginThrottled(max((spent + self.window - now).total_seconds(), 0.0))

    def succeeded(self, user_key: str, others: Sequence[str]) -> None:
        accounts.refund_login_guess(self.store, reset=user_key, refund=others)

    def refund(self, keys: Sequence[str]) -> None:
        """Take back the attempt just counted against each of ``keys``."""
        accounts.refund_login_guess(self.store, reset=None, refund=keys)


class LoginLimiter:
    """Counts failed logins per key over a sliding window, in this process only."""

    def __init__(self, *, failures: int = LOGIN_FAILURES, window: float = LOGIN_WINDOW,
                 monotonic: Callable[[], float] | None = None) -> None:
        self.failures, self.window = failures, window
        self._now = monotonic or time.monotonic
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, keys: list[str]) -> None:
        """Raise LoginThrottled if any of ``keys`` has used up its failures."""
        now = self._now()
        with self._lock:
            for key in keys:
                times = self._recent(key, now)
                if len(times) >= self.failures:
                    raise LoginThrottled(times[0] + self.window - now)

    def failed(self, keys: list[str]) -> None:
        now = self._now()
        with self._lock:
            for key in keys:
                self._recent(key, now).append(now)

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._seen.pop(key, None)

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._seen.setdefault(key, deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        return times


# -- the authenticator -------------------------------------------------------------------
class Authenticator:
    """Checks passwords and tokens against the store's users and tokens."""

    def __init__(self, store: SqlStore, *, limiter: StoredLoginLimiter | None = None,
                 gate: HashGate | None = None) -> None:
        self.store = store
        self.limiter = limiter or StoredLoginLimiter(store)
        self.gate = gate or process_gate()
        _dummy_hash()
        self._tokens: dict[str, tuple[float, Principal]] = {}  # digest → (read at, holder)

    # logins
    def login(self, username: str, password: str, client: str) -> Principal:
        """The user, if ``password`` is theirs; else NotAuthenticated or LoginThrottled."""
        name_key, address_key = limit_key("user", username), limit_key("addr", client)
        try:
            self.gate.check()  # a flood past the gate is refused before any write
        except HashGateBusy as exc:
            raise LoginBusy(exc.retry_after) from exc
        self.limiter.guess([name_key, address_key])
        user = accounts.get_user(self.store, username)
        try:
            with self.gate.slot():
                if not self._verify(user.password_hash if user else _dummy_hash(), password) \
                        or user is None:
                    raise NotAuthenticated("wrong user name or password")
                rehash = (_hasher.hash(password)
                          if _hasher.check_needs_rehash(user.password_hash) else None)
        except HashGateBusy as exc:
            self.limiter.refund([name_key, address_key])
            raise LoginBusy(exc.retry_after) from exc
        self.limiter.succeeded(name_key, [address_key])
        if rehash is not None:
            accounts.set_password_hash(self.store, user.name, rehash)
        return Principal(user.name, user.role, "user", csrf=secrets.token_urlsafe(24),
                         generation=user.session_generation)

    @staticmethod
    def _verify(password_hash: str, password: str) -> bool:
        try:
            return _hasher.verify(password_hash, password)
        except (VerificationError, InvalidHashError):
            return False

    # API tokens
    def bearer(self, authorization: str | None) -> Principal | None:
        """The holder of a valid ``Authorization: Bearer …`` token, if any."""
        digest = self._digest(authorization)
        if digest is None:
            return None
        cached = self._cached(digest)
        if cached is not None:
            return cached
        row = accounts.find_token(self.store, digest, now=utcnow())
        if row is None:
            self._tokens.pop(digest, None)
            return None
        holder = Principal(row.name, row.role, "token")
        if len(self._tokens) >= TOKEN_CACHE_SIZE:
            self._tokens.clear()
        self._tokens[digest] = (time.monotonic(), holder)
        return holder

    def cached_bearer(self, authorization: str | None) -> Principal | None:
        """:meth:`bearer` from the cache only (no database read); None: ask :meth:`bearer`."""
        digest = self._digest(authorization)
        return None if digest is None else self._cached(digest)

    def _cached(self, digest: str) -> Principal | None:
        hit = self._tokens.get(digest)
        if hit is None or time.monotonic() - hit[0] >= TOKEN_CACHE_SECONDS:
            return None
        return hit[1]

    @staticmethod
    def _digest(authorization: str | None) -> str | None:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token.startswith(TOKEN_PREFIX):
            return None
        return token_digest(token)
