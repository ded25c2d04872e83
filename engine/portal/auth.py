"""The portal's sessions, CSRF tokens and password policy (docs/security.md).

A session is a signed cookie naming the user, their session generation and its CSRF token;
the user is read again on every request, and a logout moves the generation on, ending every
session of theirs on every portal.
"""
from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

from engine.errors import OperatorError
from engine.serving.auth import Authenticator, Forbidden, Principal, StoredLoginLimiter
from engine.serving.hash_gate import HashGate
from engine.store import accounts
from engine.store.sql import SqlStore

SESSION_COOKIE = "encore_session"
LOGIN_COOKIE = "encore_login"  # pairs with the login form's CSRF token
SESSION_MAX_AGE = 8 * 3600  # seconds a session lasts after login
LOGIN_FORM_MAX_AGE = 3600  # seconds a login form stays valid
SECRET_ENV = "ENCORE_PORTAL_SECRET"  # shared by the portals of one database, if set


def check_password(password: str, min_length: int) -> None:
    """The password policy: OperatorError unless ``password`` has at least ``min_length``
    characters (``[portal] password_min_length``, 12 by default)."""
    if not password:
        raise OperatorError("the password is empty")
    if len(password) < min_length:
        raise OperatorError(f"the password has {len(password)} characters; it needs at least "
                            f"{min_length} ([portal] password_min_length)")


def portal_secret(env: Mapping[str, str]) -> str:
    """``$ENCORE_PORTAL_SECRET``, else a random secret for this process (its sessions end
    when it stops, and other portals on the database do not accept them)."""
    return env.get(SECRET_ENV) or secrets.token_urlsafe(32)


class PortalAuthenticator(Authenticator):
    """An :class:`~engine.serving.auth.Authenticator` that also issues and checks the
    portal's session cookies and login forms, signed with ``secret``."""

    def __init__(self, store: SqlStore, secret: str, *,
                 limiter: StoredLoginLimiter | None = None,
                 gate: HashGate | None = None) -> None:
        super().__init__(store, limiter=limiter, gate=gate)
        self._sessions = URLSafeTimedSerializer(secret, salt="encore-portal-session")
        self._login_forms = URLSafeTimedSerializer(secret, salt="encore-portal-login")

    # sessions
    def session_cookie(self, user: Principal) -> str:
        return self._sessions.dumps({"u": user.name, "c": user.csrf, "g": user.generation})

    def session_user(self, cookie: str | None) -> Principal | None:
        """The user of a session cookie, if it is valid, the user still exists and has not
        logged out since it was issued."""
        if not cookie:
            return None
        try:
            data: Any = self._sessions.loads(cookie, max_age=SESSION_MAX_AGE)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("u"), str):
            return None
        user = accounts.get_user(self.store, data["u"])
        if user is None or data.get("g") != user.session_generation:
            return None
        return Principal(user.name, user.role, "user", csrf=str(data.get("c", "")),
                         generation=user.session_generation, time_zone=user.time_zone)

    def logout(self, user: Principal) -> None:
        """End every session of ``user``, on every portal of the database."""
        accounts.end_sessions(self.store, user.name)

    # login form CSRF
    def login_form_token(self) -> tuple[str, str]:
        """(token for the form, value of the login cookie) for a new login form."""
        token = secrets.token_urlsafe(24)
        return token, self._login_forms.dumps(token)

    def check_login_form(self, cookie: str | None, token: str | None) -> None:
        try:
            expected = self._login_forms.loads(cookie or "", max_age=LOGIN_FORM_MAX_AGE)
        except BadSignature:
            expected = None
        if not token or not isinstance(expected, str) or \
                not hmac.compare_digest(expected, token):
            raise Forbidden("the login form has expired; reload the page and try again")


def check_csrf(user: Principal, token: str | None) -> None:
    """Refuse a form whose CSRF token is not the session's."""
    if not token or not user.csrf or not hmac.compare_digest(user.csrf, token):
        raise Forbidden("the form's CSRF token is missing or wrong; reload the page and "
                        "try again")
