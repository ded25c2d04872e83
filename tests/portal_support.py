"""Helpers of the portal tests: a production, users, tokens, a logged-in TestClient."""
from __future__ import annotations

import re
from typing import Any

from engine.clock import utcnow
from engine.config.production import ProductionConfig, parse_production
from engine.serving.auth import hash_password, new_token, token_digest
from engine.store import accounts
from engine.store.sql import SqlStore

PASSWORD = "correct horse battery staple"
PRODUCTION = """
[production]
name = "PortalTest"

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"

[[items]]
name = "Other"
class = "tests.unit.sample_ops:EchoOperation"
"""
PING = "tests.unit.sample_ops:Ping"


def production(url: str) -> ProductionConfig:
    return parse_production(PRODUCTION, env={"ENCORE_DATABASE_URL": url})


def add_user(store: SqlStore, name: str, role: str, password: str = PASSWORD) -> None:
    accounts.add_user(store, name, role, hash_password(password), now=utcnow())


def add_token(store: SqlStore, role: str, name: str | None = None) -> str:
    token = new_token()
    accounts.add_token(store, name or f"{role}-bot", role, token_digest(token), now=utcnow())
    return token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def form_token(html: str) -> str:
    """The CSRF token of the first form of a page."""
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no CSRF token on the page"
    return match.group(1)


def login(client: Any, name: str, password: str = PASSWORD) -> Any:
    """Log ``client`` in through the login form; return the response to the POST."""
    page = client.get("/login")
    return client.post("/login", data={"username": name, "password": password,
                                       "csrf_token": form_token(page.text), "next": "/"},
                       follow_redirects=False)


def csrf_of(client: Any) -> str:
    """The session's CSRF token, read from a page that has forms (the production page)."""
    return form_token(client.get("/").text)
