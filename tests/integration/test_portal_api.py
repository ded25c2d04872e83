"""The JSON API and intake through Starlette's TestClient, on SQLite and PostgreSQL (what is
only the API's, on SQLite): tokens and roles, reads, actions, and intake's validation,
idempotency and waiting."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from engine.message import encode_response
from engine.portal import create_app
from engine.portal.intake import MAX_BODY_BYTES
from engine.store.models import api_token, event_log, message_header
from engine.store.sql import SqlStore
from engine.store.transition import AttemptEnd
from tests.portal_support import PING, add_token, bearer, production
from tests.waiting import wait_until


@pytest.fixture
def client(store: SqlStore) -> Iterator[TestClient]:
    app = create_app(store, production(store.url), secret="test-secret", env={})
    with TestClient(app) as c:
        yield c


@pytest.fixture
def tokens(store: SqlStore) -> dict[str, dict[str, str]]:
    return {role: bearer(add_token(store, role))
            for role in ("sender", "viewer", "operator", "admin")}


def count(store: SqlStore) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(message_header)).scalar_one()


def send(store: SqlStore, text: str = "hi") -> int:
    return store.enqueue(target="Echo", body_class=PING, body=json.dumps({"text": text}),
                         source="cli")


# -- tokens and roles --------------------------------------------------------------------
@pytest.mark.parametrize("headers", [
    {},                                              # no header
    {"Authorization": "Bearer enc_not-a-token"},     # a token that was never issued
    {"Authorization": "Basic b2xnYTpwdw=="},         # another scheme
])
def test_the_api_refuses_a_call_without_a_valid_token_with_401(client: TestClient,
                                                               headers: dict[str, str]) -> None:
    for method, path in (("GET", "/api/v1/status"), ("GET", "/api/v1/messages"),
                         ("POST", "/api/v1/messages/Echo"), ("POST", "/api/v1/messages/1/resend")):
        response = client.request(method, path, headers=headers, json={"text": "x"})
        assert response.status_code == 401, path
        assert "error" in response.json() and response.headers["www-authenticate"] == "Bearer"


@pytest.mark.dialect_free
def test_each_role_may_do_what_it_may_and_gets_403_above_it(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    mid = send(store)
    assert client.get("/api/v1/messages", headers=tokens["sender"]).status_code == 403
    assert client.get("/api/v1/messages", headers=tokens["viewer"]).status_code == 200
    refused = client.post(f"/api/v1/messages/{mid}/suspend", headers=tokens["viewer"])
    assert refused.status_code == 403 and "operator" in refused.json()["error"]
    assert client.post("/api/v1/items/Echo/disable", headers=tokens["viewer"]).status_code == 403
    assert client.post("/api/v1/messages/Echo", headers=tokens["sender"],
                       json={"text": "x"}).status_code == 202
    assert client.post(f"/api/v1/messages/{mid}/suspend",
                       headers=tokens["admin"]).status_code == 200


@pytest.mark.dialect_free
def test_tokens_are_stored_only_as_hashes(store: SqlStore,
                                          tokens: dict[str, dict[str, str]]) -> None:
    with store.engine.connect() as conn:
        stored = [r.token_hash for r in conn.execute(select(api_token))]
    secrets = [h["Authorization"].split()[1] for h in tokens.values()]
    assert len(stored) == 4 and not set(stored) & set(secrets)
    assert all(len(h) == 64 for h in stored)


# -- reading -----------------------------------------------------------------------------
@pytest.mark.dialect_free
def test_status_lists_every_item_with_its_queue(client: TestClient, store: SqlStore,
                                                tokens: dict[str, dict[str, str]]) -> None:
    send(store)
    body = client.get("/api/v1/status", headers=tokens["viewer"]).json()
    items = {i["name"]: i for i in body["items"]}
    assert body["production"] == "PortalTest" and set(items) == {"Echo", "Other"}
    assert items["Echo"]["queued"] == 1 and items["Echo"]["enabled"] is True
    assert body["daemons"] == []


def test_messages_page_by_cursor_and_filter_like_the_viewer(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    ids = [send(store, f"m{i}") for i in range(7)]
    store.finish(ids[2], status="Error", error_text="bad", now=store.db_now())
    first = client.get("/api/v1/messages?limit=4", headers=tokens["viewer"]).json()
    assert [m["id"] for m in first["messages"]] == ids[:2:-1]
    second = client.get(f"/api/v1/messages?limit=4&before={first['older']}",
                        headers=tokens["viewer"]).json()
    assert [m["id"] for m in second["messages"]] == ids[2::-1] and second["older"] is None
    errors = client.get("/api/v1/messages?errors=1", headers=tokens["viewer"]).json()
    assert [m["id"] for m in errors["messages"]] == [ids[2]]
    bad = client.get("/api/v1/messages?status=Lost", headers=tokens["viewer"])
    assert bad.status_code == 400 and "status" in bad.json()["error"]


@pytest.mark.dialect_free
def test_one_message_comes_with_its_response_attempts_and_events(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    mid = send(store, "hello")
    _complete(store, mid, {"text": "HELLO", "count": 1})
    body = client.get(f"/api/v1/messages/{mid}", headers=tokens["viewer"]).json()
    assert body["message"]["body"] == {"text": "hello"}
    assert body["response"]["body"] == {"text": "HELLO", "count": 1}
    assert [a["outcome"] for a in body["attempts"]] == ["ok"]
    missing = client.get("/api/v1/messages/999999", headers=tokens["viewer"])
    assert missing.status_code == 404 and "does not exist" in missing.json()["error"]


def test_events_filter_by_type(client: TestClient, store: SqlStore,
                               tokens: dict[str, dict[str, str]]) -> None:
    store.events.write("Info", "fine", config_name="Echo")
    store.events.write("Error", "broken", config_name="Echo")
    body = client.get("/api/v1/events?type=Error", headers=tokens["viewer"]).json()
    assert [e["text"] for e in body["events"]] == ["broken"]


# -- actions -----------------------------------------------------------------------------
@pytest.mark.dialect_free
def test_an_operator_token_suspends_resends_and_discards_and_each_is_audited(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    mid = send(store)
    op = tokens["operator"]
    assert client.post(f"/api/v1/messages/{mid}/suspend", headers=op).json() == \
        {"id": mid, "status": "Suspended"}
    resent = client.post(f"/api/v1/messages/{mid}/resend", headers=op).json()
    assert store.get_message(resent["resent_as"]).status == "Queued"
    assert client.post(f"/api/v1/messages/{mid}/discard", headers=op).json()["status"] == \
        "Discarded"
    again = client.post(f"/api/v1/messages/{mid}/discard", headers=op)
    assert again.status_code == 409 and "Discarded" in again.json()["error"]
    with store.engine.connect() as conn:
        audit = conn.execute(select(event_log.c.type, event_log.c.text).where(
            event_log.c.source_class == "Operator").order_by(event_log.c.id)).all()
    assert [t for t, _ in audit] == ["Info"] * 3
    assert all("operator-bot" in text for _, text in audit)


@pytest.mark.dialect_free
def test_an_operator_token_disables_and_enables_an_item(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    op = tokens["operator"]
    assert client.post("/api/v1/items/Echo/disable", headers=op).json() == \
        {"item": "Echo", "enabled": False}
    assert store.item_overrides() == {"Echo": False}
    client.post("/api/v1/items/Echo/enable", headers=op)
    assert store.item_overrides() == {"Echo": True}
    assert client.post("/api/v1/items/Nope/enable", headers=op).status_code == 404


# -- intake ------------------------------------------------------------------------------
@pytest.mark.dialect_free
def test_intake_commits_a_message_and_answers_202_with_its_id_and_session(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    response = client.post("/api/v1/messages/Echo", headers=tokens["sender"],
                           json={"text": "hi", "count": 2})
    assert response.status_code == 202
    body = response.json()
    row = store.get_message(body["id"])
    assert row.status == "Queued" and row.session_id == body["session_id"]
    assert row.source == "api:sender-bot" and json.loads(row.body) == {"text": "hi", "count": 2}


@pytest.mark.parametrize("target, content, status, says", [
    ("Echo", b"{not json", 400, "not valid JSON"),               # bad JSON
    ("Echo", b'{"text": NaN}', 400, "NaN"),                      # JSON has no NaN
    ("Echo", b'{"text": 1e999}', 400, "finite"),                 # nor infinities
    ("Echo", b'{"txt": "hi"}', 400, "unknown field"),            # does not fit Ping
    ("Echo", b'{"text": 5}', 400, "must be str"),                # wrong type
    ("Echo", b"[1, 2]", 400, "JSON object"),                     # not an object
    ("Echo", b"\xff\xfe", 400, "UTF-8"),                         # not text
    ("Nowhere", b'{"text": "hi"}', 404, "unknown target"),       # no such item
])
def test_intake_refuses_a_bad_call_and_creates_nothing(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]], target: str,
        content: bytes, status: int, says: str) -> None:
    response = client.post(f"/api/v1/messages/{target}", headers=tokens["sender"],
                           content=content)
    assert response.status_code == status and says in response.json()["error"]
    assert count(store) == 0


@pytest.mark.dialect_free
def test_intake_refuses_a_body_over_the_limit_with_413(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    big = json.dumps({"text": "x" * MAX_BODY_BYTES}).encode()
    response = client.post("/api/v1/messages/Echo", headers=tokens["sender"], content=big)
    assert response.status_code == 413 and count(store) == 0

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
        yield b'{"text": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 1):
            yield b"x" * 65536
        yield b'"}'

    streamed = client.post("/api/v1/messages/Echo", headers=tokens["sender"],
                           content=chunks())
    assert streamed.status_code == 413 and count(store) == 0


def test_the_same_idempotency_key_returns_the_first_message_and_creates_nothing(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    headers = {**tokens["sender"], "Idempotency-Key": "order-42"}
    first = client.post("/api/v1/messages/Echo", headers=headers, json={"text": "a"})
    again = client.post("/api/v1/messages/Echo", headers=headers, json={"text": "a"})
    assert first.json() == again.json()
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    other = client.post("/api/v1/messages/Echo", headers={**headers, "Idempotency-Key": "43"},
                        json={"text": "a"})
    assert other.json()["id"] != first.json()["id"] and count(store) == 2
    too_long = client.post("/api/v1/messages/Echo",
                           headers={**headers, "Idempotency-Key": "k" * 201}, json={"text": "a"})
    assert too_long.status_code == 400 and count(store) == 2


def test_wait_answers_504_when_the_message_is_not_done_in_time(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    started = time.monotonic()
    response = client.post("/api/v1/messages/Echo?wait=0.3", headers=tokens["sender"],
                           json={"text": "hi"})
    assert response.status_code == 504 and time.monotonic() - started >= 0.3
    assert store.get_message(response.json()["id"]).status == "Queued"  # it goes on


def test_wait_answers_200_with_the_response_when_the_message_completes(
        client: TestClient, store: SqlStore, tokens: dict[str, dict[str, str]]) -> None:
    def worker() -> None:  # a stand-in daemon: claim the message, answer it
        claimed = wait_until(lambda: store.claim("Echo", owner="test", now=store.db_now(),
                                                 lease_seconds=30), 10, "the message to claim")
        _complete(store, claimed[0].row.id, {"text": "HI", "count": 1}, claimed=True)

    thread = threading.Thread(target=worker)
    thread.start()
    response = client.post("/api/v1/messages/Echo?wait=10", headers=tokens["sender"],
                           json={"text": "hi"})
    thread.join()
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "Completed" and body["response"] == {"text": "HI", "count": 1}


def _complete(store: SqlStore, message_id: int, response: dict[str, object], *,
              claimed: bool = False) -> None:
    """Record one successful attempt of ``message_id`` and its response."""
    now = store.db_now()
    if not claimed:
        store.claim("Echo", owner="test", now=now, lease_seconds=30)
    attempt = store.begin_attempt(message_id, 1, started_at=now)
    row = store.get_message(message_id)
    response_class, body = encode_response(response)
    store.complete(row, response_class=response_class, response_body=body, now=now,
                   attempt=AttemptEnd(attempt, now, "http://service.invalid/"))
