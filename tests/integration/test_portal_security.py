"""Hostile callers of the portal and intake (issue 22, findings 3, 4 and 8), on SQLite and
PostgreSQL, through Starlette's TestClient and through uvicorn on loopback: idempotency keys
belong to their caller, the login limit holds for racing guesses on several portals,
X-Forwarded-For only from a named proxy, sessions end at logout (a CSRF-checked POST), a lone
surrogate is refused at intake and by ``encore send``, and ``?wait`` callers are capped."""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import func, select
from starlette.testclient import TestClient

from engine.clock import utcnow
from engine.config.production import PortalConfig, parse_production
from engine.errors import ConfigurationError
from engine.portal import create_app
from engine.portal.auth import SESSION_COOKIE
from engine.portal.server import PortalServer
from engine.serving.auth import (
    LOGIN_FAILURES,
    Authenticator,
    LoginThrottled,
    StoredLoginLimiter,
)
from engine.store.models import message_header
from engine.store.sql import SqlStore
from tests.acceptance.daemon import encore
from tests.integration.test_portal_server import free_port
from tests.portal_support import (
    PRODUCTION,
    add_token,
    add_user,
    bearer,
    csrf_of,
    form_token,
    login,
    production,
)
from tests.waiting import wait_until

HTTP_TIMEOUT = 60  # seconds one call may take on a loaded machine
RACERS = 80  # parallel login guesses


def count(store: SqlStore) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(message_header)).scalar_one()


@pytest.fixture
def client(store: SqlStore) -> Iterator[TestClient]:
    app = create_app(store, production(store.url), secret="test-secret", env={})
    with TestClient(app) as c:
        yield c


@pytest.fixture
def serve(store: SqlStore) -> Iterator[Callable[..., str]]:
    """Start a portal over uvicorn on ``store`` with a [portal] table; its URL."""
    servers: list[PortalServer] = []

    def start(**table: Any) -> str:
        config = PortalConfig.from_validated({"port": free_port(), **table})
        server = PortalServer(store, production(store.url), config,
                              env={"ENCORE_PORTAL_SECRET": "shared-secret"})
        server.start()
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.stop()


def complete(store: SqlStore, message_id: int, response: dict[str, Any]) -> None:
    """A stand-in daemon: claim ``message_id`` and answer it with ``response``."""
    from engine.message import encode_response
    from engine.store.transition import AttemptEnd

    now = store.db_now()
    claimed = store.claim("Echo", owner="test", now=now, lease_seconds=30)
    assert [c.row.id for c in claimed] == [message_id]
    attempt = store.begin_attempt(message_id, 1, started_at=now)
    response_class, body = encode_response(response)
    store.complete(store.get_message(message_id), response_class=response_class,
                   response_body=body, now=now,
                   attempt=AttemptEnd(attempt, now, "http://service.invalid/"))


# -- idempotency keys belong to their caller (finding 3) ---------------------------------
def test_another_caller_s_key_is_another_message_and_never_shows_the_first_one(
        client: TestClient, store: SqlStore) -> None:
    alice = {**bearer(add_token(store, "sender", "alice")), "Idempotency-Key": "order-1"}
    bob = {**bearer(add_token(store, "sender", "bob")), "Idempotency-Key": "order-1"}
    first = client.post("/api/v1/messages/Echo", headers=alice, json={"text": "alice's"})
    complete(store, first.json()["id"], {"text": "ALICE'S SECRET", "count": 1})
    stolen = client.post("/api/v1/messages/Echo?wait=0.2", headers=bob, json={"text": "bob's"})
    assert stolen.status_code == 504  # bob's own message, not yet done: nothing of alice's
    assert stolen.json()["id"] != first.json()["id"] and "SECRET" not in stolen.text
    assert "idempotent-replayed" not in stolen.headers
    assert json.loads(store.get_message(stolen.json()["id"]).body)["text"] == "bob's"
    assert count(store) == 3  # alice's request and response, bob's request
    # each caller's replay is their own message
    again = client.post("/api/v1/messages/Echo?wait=5", headers=alice, json={"text": "alice's"})
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["response"] == {"text": "ALICE'S SECRET", "count": 1}
    bob_again = client.post("/api/v1/messages/Echo", headers=bob, json={"text": "bob's"})
    assert bob_again.json()["id"] == stolen.json()["id"] and count(store) == 3


def test_the_same_key_again_with_another_body_is_refused_with_422_and_creates_nothing(
        client: TestClient, store: SqlStore) -> None:
    headers = {**bearer(add_token(store, "sender")), "Idempotency-Key": "pay-7"}
    first = client.post("/api/v1/messages/Echo", headers=headers, json={"text": "7 EUR"})
    assert first.status_code == 202
    for path in ("/api/v1/messages/Echo", "/api/v1/messages/Echo?wait=0.2"):
        other = client.post(path, headers=headers, json={"text": "7000 EUR"})
        assert other.status_code == 422, path
        assert "another body" in other.json()["error"]
    assert count(store) == 1
    # the same JSON value written otherwise is the same body: a replay
    same = client.post("/api/v1/messages/Echo", headers=headers,
                       content='{"count": 1,  "text": "7 EUR"}')
    assert same.status_code == 202 and same.json()["id"] == first.json()["id"]
    assert same.headers["idempotent-replayed"] == "true"


def test_a_replay_says_so_on_every_path_wait_included(client: TestClient,
                                                      store: SqlStore) -> None:
    headers = {**bearer(add_token(store, "sender")), "Idempotency-Key": "k-1"}
    first = client.post("/api/v1/messages/Echo?wait=0.1", headers=headers, json={"text": "x"})
    assert first.status_code == 504 and "idempotent-replayed" not in first.headers
    pending = client.post("/api/v1/messages/Echo?wait=0.1", headers=headers, json={"text": "x"})
    assert pending.status_code == 504 and pending.headers["idempotent-replayed"] == "true"
    complete(store, first.json()["id"], {"text": "X", "count": 1})
    done = client.post("/api/v1/messages/Echo?wait=1", headers=headers, json={"text": "x"})
    assert done.status_code == 200 and done.headers["idempotent-replayed"] == "true"
    plain = client.post("/api/v1/messages/Echo", headers=headers, json={"text": "x"})
    assert plain.status_code == 202 and plain.headers["idempotent-replayed"] == "true"
    assert {r.json()["id"] for r in (first, pending, done, plain)} == {first.json()["id"]}


def test_the_production_s_own_keys_are_not_an_api_caller_s(store: SqlStore,
                                                           client: TestClient) -> None:
    """A key taken by the production (a business process's call, the command line) and the
    same key from a token are two messages; the production's callers share one scope."""
    cli = store.accept(target="Echo", body_class=None, body='{"text":"cli"}', source="cli",
                       idempotency_key="shared")
    process = store.accept(target="Echo", body_class=None, body='{"text":"p"}',
                           source="Shop", idempotency_key="shared")
    assert cli.created and not process.created and process.id == cli.id
    api = client.post("/api/v1/messages/Echo", json={"text": "api"},
                      headers={**bearer(add_token(store, "sender")), "Idempotency-Key": "shared"})
    assert api.status_code == 202 and api.json()["id"] != cli.id
    assert "idempotent-replayed" not in api.headers


def test_racing_callers_with_one_key_get_one_message_each_and_other_bodies_get_422(
        store: SqlStore, serve: Callable[..., str]) -> None:
    """Two portals, two callers, one key, two bodies each: the unique index decides."""
    urls = [serve(), serve()]
    holders = {name: bearer(add_token(store, "sender", name)) for name in ("alice", "bob")}
    barrier = threading.Barrier(40)
    answers: list[tuple[str, str, int, dict[str, Any]]] = []
    lock = threading.Lock()

    def post(n: int) -> None:
        name, body = ("alice", "bob")[n % 2], ("one", "two")[(n // 2) % 2]
        with requests.Session() as http:
            barrier.wait()
            response = http.post(f"{urls[n % 3 % 2]}/api/v1/messages/Echo",
                                 headers={**holders[name], "Idempotency-Key": "race"},
                                 json={"text": body}, timeout=HTTP_TIMEOUT)
        with lock:
            answers.append((name, body, response.status_code, response.json()))

    threads = [threading.Thread(target=post, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HTTP_TIMEOUT * 2)
    assert len(answers) == 40
    with store.engine.connect() as conn:
        rows = conn.execute(select(message_header.c.id, message_header.c.source,
                                   message_header.c.body)).all()
    assert sorted(r.source for r in rows) == ["api:alice", "api:bob"]
    for row in rows:
        name, body = row.source[len("api:"):], json.loads(row.body)["text"]
        mine = [(b, status, answer) for n, b, status, answer in answers if n == name]
        assert {answer["id"] for b, status, answer in mine if b == body} == {row.id}
        assert {status for b, status, _ in mine if b == body} == {202}
        assert {status for b, status, _ in mine if b != body} == {422}


# -- the login limit (finding 4) ---------------------------------------------------------
def test_parallel_guesses_on_two_portals_check_at_most_the_limit_of_passwords(
        store: SqlStore, serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    add_user(store, "olga", "operator")
    urls = [serve(), serve()]
    checked: list[str] = []
    verify = Authenticator._verify

    def counted(password_hash: str, password: str) -> bool:
        checked.append(password)
        return verify(password_hash, password)

    monkeypatch.setattr(Authenticator, "_verify", staticmethod(counted))
    barrier = threading.Barrier(RACERS)
    statuses: list[int | str] = []
    lock = threading.Lock()

    def guess(n: int) -> None:
        with requests.Session() as http:
            url = urls[n % 2]
            # a connection of its own for the guess: one kept alive through the barrier
            # could be closed by the server meanwhile
            form = form_token(http.get(f"{url}/login", headers={"Connection": "close"},
                                       timeout=HTTP_TIMEOUT).text)
            barrier.wait()
            try:
                response = http.post(f"{url}/login", allow_redirects=False,
                                     timeout=HTTP_TIMEOUT,
                                     data={"username": "olga", "password": f"guess-{n}",
                                           "csrf_token": form, "next": "/"})
                status = response.status_code
            except requests.RequestException as exc:
                status = f"{type(exc).__name__}: {exc}"
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HTTP_TIMEOUT * 2)
    assert len(statuses) == RACERS and set(statuses) <= {401, 429}, statuses
    assert len(checked) <= LOGIN_FAILURES
    assert statuses.count(401) == len(checked) and statuses.count(429) == RACERS - len(checked)


def test_logins_that_succeed_do_not_use_up_the_address_s_limit(client: TestClient,
                                                                store: SqlStore) -> None:
    add_user(store, "olga", "operator")
    for _ in range(LOGIN_FAILURES - 1):
        assert login(client, "olga", "wrong").status_code == 401
    for _ in range(LOGIN_FAILURES + 2):  # each takes its own attempt back
        assert login(client, "olga").status_code == 303
        client.cookies.clear()
    assert login(client, "olga", "wrong").status_code == 401  # the address's fifth failure
    assert login(client, "olga").status_code == 429


def test_the_limit_holds_until_its_window_has_passed(store: SqlStore) -> None:
    now = [utcnow()]
    limiter = StoredLoginLimiter(store, failures=3, window=60, now=lambda: now[0])
    for _ in range(3):
        limiter.guess(["user:a", "addr:x"])
    with pytest.raises(LoginThrottled) as throttled:
        limiter.guess(["user:b", "addr:x"])  # the address is spent for every name
    assert 59 <= throttled.value.retry_after <= 60
    limiter.guess(["user:b", "addr:y"])  # nothing was counted for user:b on the refusal
    limiter.guess(["user:b", "addr:y"])
    now[0] += timedelta(seconds=61)
    limiter.guess(["user:a", "addr:x"])  # a new window


def test_x_forwarded_for_names_the_client_only_from_a_proxy_the_portal_table_names(
        store: SqlStore, serve: Callable[..., str]) -> None:
    direct, proxied = serve(), serve(forwarded_allow_ips=["127.0.0.1"])

    def statuses(url: str, forwarded: Callable[[int], str]) -> list[int]:
        out = []
        with requests.Session() as http:
            for n in range(LOGIN_FAILURES + 1):
                form = form_token(http.get(f"{url}/login", timeout=HTTP_TIMEOUT).text)
                out.append(http.post(f"{url}/login", allow_redirects=False,
                                     headers={"X-Forwarded-For": forwarded(n)},
                                     timeout=HTTP_TIMEOUT,
                                     data={"username": f"user-{url[-5:]}-{n}",
                                           "password": "x", "csrf_token": form}).status_code)
        return out

    # a new address with every guess: ignored without a named proxy, the address is spent
    assert statuses(direct, lambda n: f"203.0.113.{n}") == [401] * LOGIN_FAILURES + [429]
    # from the named proxy each forwarded address is a client of its own
    assert statuses(proxied, lambda n: f"198.51.100.{n}") == [401] * (LOGIN_FAILURES + 1)
    assert statuses(proxied, lambda n: "192.0.2.1") == [401] * LOGIN_FAILURES + [429]


def test_forwarded_allow_ips_and_max_waiters_are_checked_at_load() -> None:
    base = "[production]\nname = \"P\"\n[portal]\n"
    portal = parse_production(base + 'forwarded_allow_ips = ["10.0.0.0/8", "::1"]\n',
                              env={}).portal
    assert portal is not None and portal.forwarded_allow_ips == ("10.0.0.0/8", "::1")
    assert portal.max_waiters == 100
    assert PortalConfig.defaults().forwarded_allow_ips == ()
    for table, says in (('forwarded_allow_ips = ["proxy.local"]', "not an IP address"),
                        ("max_waiters = -1", "out of range")):
        with pytest.raises(ConfigurationError, match=says):
            parse_production(base + table + "\n", env={})


# -- sessions end at logout (finding 8) --------------------------------------------------
def test_a_session_cookie_stops_working_after_logout_on_every_portal(store: SqlStore) -> None:
    add_user(store, "olga", "operator")
    one = create_app(store, production(store.url), secret="shared", env={})
    two = create_app(store, production(store.url), secret="shared", env={})
    with TestClient(one) as first, TestClient(two) as second:
        assert login(first, "olga").status_code == 303
        cookie = first.cookies.get(SESSION_COOKIE)
        second.cookies.set(SESSION_COOKIE, cookie)
        assert second.get("/", follow_redirects=False).status_code == 200
        out = first.post("/logout", data={"csrf_token": csrf_of(first)},
                         follow_redirects=False)
        assert out.status_code == 303 and out.headers["location"] == "/login"
        for c in (first, second):
            c.cookies.clear()
            c.cookies.set(SESSION_COOKIE, cookie)  # the old cookie, kept by an attacker
            assert c.get("/", follow_redirects=False).status_code == 303
        first.cookies.clear()
        assert login(first, "olga").status_code == 303  # a new login is a new session
        assert first.get("/", follow_redirects=False).status_code == 200


def test_logout_is_a_post_with_the_session_s_csrf_token(client: TestClient,
                                                        store: SqlStore) -> None:
    add_user(store, "olga", "operator")
    login(client, "olga")
    asked = client.get("/logout", follow_redirects=False)  # a link cannot log anyone out
    assert asked.status_code == 200 and 'action="/logout"' in asked.text
    assert client.get("/", follow_redirects=False).status_code == 200
    for data in ({}, {"csrf_token": "forged"}):  # a form from another site cannot either
        assert client.post("/logout", data=data, follow_redirects=False).status_code == 403
        assert client.get("/", follow_redirects=False).status_code == 200
    page = client.get("/")
    assert '<form class="logout" method="post" action="/logout">' in page.text
    assert client.post("/logout", data={"csrf_token": form_token(asked.text)},
                       follow_redirects=False).status_code == 303
    assert client.get("/", follow_redirects=False).status_code == 303


# -- lone surrogates (finding 8) ---------------------------------------------------------
def test_a_lone_surrogate_is_refused_at_intake_and_a_pair_is_kept(client: TestClient,
                                                                  store: SqlStore) -> None:
    sender = bearer(add_token(store, "sender"))
    for body in ('{"text": "\\ud800"}', '{"text": "a\\udfffb"}', '{"text": "\\ude00\\ud83d"}',
                 '{"text": "x", "\\ud800": 1}'):
        refused = client.post("/api/v1/messages/Echo", headers=sender, content=body)
        assert refused.status_code == 400, body
        assert "lone UTF-16 surrogate" in refused.json()["error"]
    assert count(store) == 0
    kept = client.post("/api/v1/messages/Echo", headers=sender,
                       content='{"text": "\\ud83d\\ude00 and a \\\\ud800 written out"}')
    assert kept.status_code == 202
    message_id = kept.json()["id"]
    add_user(store, "vera", "viewer")
    login(client, "vera")
    assert client.get(f"/messages/{message_id}").status_code == 200
    shown = client.get(f"/api/v1/messages/{message_id}",
                       headers=bearer(add_token(store, "viewer")))
    assert shown.json()["message"]["body"]["text"] == "\U0001f600 and a \\ud800 written out"


def test_encore_send_refuses_a_lone_surrogate_and_enqueues_nothing(store: SqlStore,
                                                                   tmp_path: Path) -> None:
    (tmp_path / "production.toml").write_text(
        PRODUCTION.replace('name = "PortalTest"',
                           f'name = "PortalTest"\ndatabase = "{store.url}"'))
    result = encore("send", "Echo", "--body", '{"text": "\\ud800"}', cwd=tmp_path, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "lone UTF-16 surrogate" in result.stderr and count(store) == 0


# -- concurrent ?wait callers (finding 8) ------------------------------------------------
def test_wait_callers_past_the_cap_get_503_and_create_nothing(
        store: SqlStore, serve: Callable[..., str]) -> None:
    url = serve(max_waiters=2)
    sender = bearer(add_token(store, "sender"))
    waiting: list[requests.Response] = []

    def wait() -> None:
        waiting.append(requests.post(f"{url}/api/v1/messages/Echo?wait=3", headers=sender,
                                     json={"text": "w"}, timeout=HTTP_TIMEOUT))

    threads = [threading.Thread(target=wait) for _ in range(2)]
    for thread in threads:
        thread.start()
    wait_until(lambda: count(store) >= 2, 10, "the two waiting calls' messages")
    refused = requests.post(f"{url}/api/v1/messages/Echo?wait=3", headers=sender,
                            json={"text": "over"}, timeout=HTTP_TIMEOUT)
    assert refused.status_code == 503 and "2 calls are waiting" in refused.json()["error"]
    assert refused.headers["retry-after"] == "1" and count(store) == 2
    plain = requests.post(f"{url}/api/v1/messages/Echo", headers=sender, json={"text": "no"},
                          timeout=HTTP_TIMEOUT)
    assert plain.status_code == 202  # intake without ?wait is not capped
    for thread in threads:
        thread.join(HTTP_TIMEOUT)
    assert [r.status_code for r in waiting] == [504, 504]
    again = requests.post(f"{url}/api/v1/messages/Echo?wait=0.1", headers=sender,
                          json={"text": "later"}, timeout=HTTP_TIMEOUT)
    assert again.status_code == 504  # the slots are free again

