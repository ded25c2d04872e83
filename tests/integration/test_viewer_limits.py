"""Bounded searches (issue 36), on SQLite and PostgreSQL: a ``q`` past its length limit is
refused with a message, page and API alike; SQLite refusing a LIKE pattern as too complex
answers 400, not "database unavailable"; on PostgreSQL a list's query runs under a
statement timeout whose end answers 503 asking for a narrower search."""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from engine.client import send_messages
from engine.config.production import parse_production
from engine.portal import create_app, filters
from engine.store import viewer
from engine.store.sql import SqlStore
from engine.store.viewer import MessageFilter, SearchTooComplex
from tests.portal_support import add_token, add_user, bearer, login

PRODUCTION = """
[production]
name = "Limits"

[[items]]
name = "Orders"
class = "tests.unit.sample_ops:RetryTwiceOperation"
[items.settings]
search_properties = ["order"]
"""
LONG_Q = "x" * 60_000  # the finding's pattern: 21.6 s over 100k messages on PostgreSQL


@pytest.fixture
def client(store: SqlStore) -> Iterator[TestClient]:
    add_user(store, "vera", "viewer")
    production = parse_production(PRODUCTION, env={"ENCORE_DATABASE_URL": store.url})
    send_messages(store, production, "Orders", [{"order": n} for n in range(3)])
    with TestClient(create_app(store, production, secret="s", env={})) as c:
        yield c


def test_a_60000_character_q_is_refused_with_the_limit_on_the_api_and_the_page(
        client: TestClient, store: SqlStore) -> None:
    api = client.get("/api/v1/messages", params={"q": LONG_Q},
                     headers=bearer(add_token(store, "viewer")))
    assert api.status_code == 400
    assert api.json()["error"].startswith("q: the search text is 60,000 characters long; "
                                          "at most 400")
    login(client, "vera")
    page = client.get("/messages", params={"q": LONG_Q})
    assert page.status_code == 400 and "at most 400" in page.text
    export = client.get("/messages.csv", params={"q": LONG_Q})
    assert export.status_code == 400
    assert client.get("/messages", params={"q": "x" * 400}).status_code == 200


def test_sqlite_refusing_a_pattern_as_too_complex_answers_400(
        client: TestClient, store: SqlStore, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    if store.is_postgres:
        pytest.skip("SQLite only: its LIKE refuses a pattern over 50,000 bytes; PostgreSQL "
                    "has no such limit (its statement timeout is the next test)")
    with pytest.raises(SearchTooComplex, match="shorter"):
        viewer.messages_page(store, MessageFilter(q=LONG_Q))
    monkeypatch.setattr(filters, "MAX_QUERY", 100_000)  # the portal's own limit out of the way
    with caplog.at_level(logging.ERROR):
        answer = client.get("/api/v1/messages", params={"q": LONG_Q},
                            headers=bearer(add_token(store, "viewer")))
    assert answer.status_code == 400
    assert answer.json()["error"] == ("the search text is too complex for the database; use "
                                      "a shorter one")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_postgres_search_past_its_statement_timeout_answers_503_narrow_your_search(
        client: TestClient, store: SqlStore, monkeypatch: pytest.MonkeyPatch) -> None:
    if not store.is_postgres:
        pytest.skip("PostgreSQL only: SQLite has no statement timeout (its pattern "
                    "limit is the test before)")
    monkeypatch.setattr(viewer, "SEARCH_TIMEOUT", 0.5)
    token = bearer(add_token(store, "viewer"))
    # Another session holds the table: the search waits on it past its timeout, as a search
    # that reads millions of rows would run past it.
    # Without the timeout the search would wait for the lock: it is let go after 10 s, so
    # that such a search answers 200 late and the test fails rather than hangs.
    with store.engine.connect() as holder:
        holder.exec_driver_sql("LOCK TABLE message_header IN ACCESS EXCLUSIVE MODE")
        release = threading.Timer(10.0, holder.rollback)
        release.start()
        try:
            answer = client.get("/api/v1/messages", params={"q": "order"}, headers=token)
        finally:
            release.cancel()
        holder.rollback()
    assert answer.status_code == 503
    assert answer.json()["error"].startswith("the search took longer than 0.5 s and was "
                                             "stopped; narrow it")
    again = client.get("/api/v1/messages", params={"q": "order"}, headers=token)
    assert again.status_code == 200 and len(again.json()["messages"]) == 3
