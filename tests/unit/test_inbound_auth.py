"""``auth = "none"`` takes callers on loopback only; a Basic header that is not one is
refused naming what is expected (docs/inbound.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.inbound.auth import CallerAuth
from engine.inbound.refusals import Refused
from engine.store.sql import SqlStore


@pytest.fixture
def auth(tmp_path: Path) -> CallerAuth:
    return CallerAuth(SqlStore(f"sqlite:///{tmp_path / 'a.db'}"))


@pytest.mark.parametrize("client", ["127.0.0.1", "127.8.9.10", "::1"])
def test_none_takes_loopback_callers(auth: CallerAuth, client: str) -> None:
    assert auth.principal("none", None, client) is None


@pytest.mark.parametrize("client", ["10.0.0.5", "192.0.2.1", "2001:db8::1", "unknown"])
def test_none_refuses_callers_beyond_loopback(auth: CallerAuth, client: str) -> None:
    with pytest.raises(Refused) as refused:
        auth.principal("none", None, client)
    assert refused.value.status == 403 and "loopback only" in refused.value.text


@pytest.mark.parametrize("header, words", [
    (None, "HTTP Basic authentication is needed"),
    ("Bearer enc_x", "HTTP Basic authentication is needed"),
    ("Basic !!!", "base64 of user:password"),
    ("Basic dXNlcg==", "base64 of user:password"),  # "user", no colon
])
def test_a_basic_header_that_is_not_one(auth: CallerAuth, header: str | None,
                                        words: str) -> None:
    with pytest.raises(Refused) as refused:
        auth.principal("basic", header, "127.0.0.1")
    assert refused.value.status == 401 and words in refused.value.text
    assert refused.value.headers["WWW-Authenticate"].startswith("Basic")
