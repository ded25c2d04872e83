"""HttpService end to end with ``requests``, on SQLite (docs/inbound.md; idempotency also on
PostgreSQL): sync mode answering with the target's response (an HttpOperation's status,
headers and body; a process's JSON), async mode answering 202 with the id, a target's error
(502) and timeout (504), bad requests refused with nothing created (400, 404, 405, 413),
Idempotency-Key per caller, the three kinds of authentication, and TLS as the portal has it."""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import requests

from engine.client import wait_for
from engine.clock import utcnow
from engine.process import BusinessProcess
from engine.serving.auth import hash_password, new_token, token_digest
from engine.store import accounts, queries
from engine.store.sql import SqlStore
from tests.integration.inbound_support import free_port, running
from tests.servers import HttpTestServer, make_tls, respond

pytestmark = pytest.mark.dialect_free

WAIT = 30  # seconds a test waits for a message at most


class Orders(BusinessProcess):
    """POST /orders/{id}: the order to the backend, whose reply is the answer."""

    def on_request(self, request: Any) -> Any:
        body = request.data
        order = {"id": body["path_params"]["id"], **body["json"], "query": body.get("query")}
        return self.send_request_sync("Backend", {"method": "POST", "path": "/orders",
                                                  "json": order}, timeout=10)


class Echo(BusinessProcess):
    """Anything: the message it was given, as JSON."""

    def on_request(self, request: Any) -> Any:
        if request.data.get("json", {}).get("fail"):
            raise ValueError("the order is refused by the process")
        return request.data


def _items(backend: HttpTestServer, slow: HttpTestServer, auth: str = "none") -> str:
    here = __name__
    return f'''
[[items]]
name = "OrdersHttp"
class = "engine.inbound:HttpService"
[items.settings]
routes = [{{method = "POST", path = "/orders/{{id}}", target = "Orders"}},
          {{method = "POST", path = "/echo", target = "Echo"}},
          {{method = "PUT", path = "/direct", target = "Backend"}},
          {{method = "POST", path = "/slow", target = "Slow"}}]
mode = "sync"
headers = ["x-request-id"]
response_timeout = 1
max_body_bytes = 10000
auth = "{auth}"

[[items]]
name = "OrdersAsync"
class = "engine.inbound:HttpService"
[items.settings]
routes = [{{method = "POST", path = "/async/echo", target = "Echo"}}]
mode = "async"
auth = "{auth}"

[[items]]
name = "Orders"
class = "{here}:Orders"
pool_size = 2

[[items]]
name = "Echo"
class = "{here}:Echo"
pool_size = 2

[[items]]
name = "Backend"
class = "operations.http:HttpOperation"
[items.settings]
url = "{backend.url}"

[[items]]
name = "Slow"
class = "operations.http:HttpOperation"
[items.settings]
url = "{slow.url}"
response_timeout = 10
'''


@pytest.fixture
def servers() -> tuple[HttpTestServer, HttpTestServer]:
    created = respond(201, json.dumps({"order": "accepted"}), content_type="application/json",
                      headers={"X-Order": "A-7"})
    with HttpTestServer({"/orders": created, "/direct": respond(200, "direct reply")}) as fast, \
            HttpTestServer({"/slow": respond(200, "late", delay=3)}) as slow:
        yield fast, slow


def test_sync_answers_with_the_targets_http_response(
        store: SqlStore, servers: tuple[HttpTestServer, HttpTestServer]) -> None:
    fast, slow = servers
    port = free_port()
    with running(store, _items(fast, slow), port):
        base = f"http://127.0.0.1:{port}"
        reply = requests.post(f"{base}/orders/7?channel=web", json={"amount": 12},
                              headers={"X-Request-Id": "r-1"}, timeout=30)
        assert reply.status_code == 201, reply.text
        assert reply.headers["x-order"] == "A-7"
        assert reply.json() == {"order": "accepted"}
        sent = json.loads(fast.requests[0].body)
        assert sent == {"id": "7", "amount": 12, "query": {"channel": "web"}}
        echoed = requests.post(f"{base}/echo", data="plain words",
                               headers={"Content-Type": "text/plain", "X-Request-Id": "r-2"},
                               timeout=30)
        assert echoed.status_code == 200
        assert echoed.json() == {"method": "POST", "path": "/echo",
                                 "headers": {"x-request-id": "r-2"}, "body": "plain words"}
        binary = requests.post(f"{base}/echo", data=b"\xff\x00\x01",
                               headers={"Content-Type": "application/octet-stream"}, timeout=30)
        assert base64.b64decode(binary.json()["body_base64"]) == b"\xff\x00\x01"
        direct = requests.put(f"{base}/direct", data="hi", timeout=30)  # an HttpOperation
        assert direct.status_code == 200 and direct.text == "direct reply"
    first = queries.messages(store, item="Orders")[0]
    assert first["source"] == "OrdersHttp" and first["session_id"] == first["id"]


def test_async_answers_202_with_the_id_and_the_message_goes_through(
        store: SqlStore, servers: tuple[HttpTestServer, HttpTestServer]) -> None:
    fast, slow = servers
    port = free_port()
    with running(store, _items(fast, slow), port):
        reply = requests.post(f"http://127.0.0.1:{port}/async/echo", json={"n": 1}, timeout=30)
        assert reply.status_code == 202, reply.text
        ident = reply.json()["id"]
        assert reply.json()["session_id"] == ident
        ended = wait_for(store, ident, WAIT)
    assert ended is not None and ended.status == "Completed"
    assert ended.source == "OrdersAsync" and ended.target == "Echo"


def test_a_targets_error_answers_502_and_a_timeout_504(
        store: SqlStore, servers: tuple[HttpTestServer, HttpTestServer]) -> None:
    fast, slow = servers
    port = free_port()
    with running(store, _items(fast, slow), port):
        base = f"http://127.0.0.1:{port}"
        failed = requests.post(f"{base}/echo", json={"fail": True}, timeout=30)
        assert failed.status_code == 502
        assert "ended Error" in failed.json()["error"]
        assert "refused by the process" in failed.json()["error"]
        late = requests.post(f"{base}/slow", data="x", timeout=30)
        assert late.status_code == 504
        assert "not finished after 1 s" in late.json()["error"]
        ended = wait_for(store, late.json()["id"], WAIT)
    assert ended is not None and ended.status == "Completed"  # the message went on


@pytest.mark.parametrize("method, path, kwargs, status, text", [
    ("POST", "/echo", {"data": "{not json", "headers": {"Content-Type": "application/json"}},
     400, "not valid JSON"),
    ("POST", "/echo", {"data": "x" * 20000}, 413, "max_body_bytes 10000"),
    ("POST", "/nowhere", {"json": {}}, 404, "no inbound service at /nowhere"),
    ("GET", "/echo", {}, 405, "GET is not allowed on /echo"),
    ("POST", "/echo", {"json": {}, "headers": {"Idempotency-Key": "k" * 300}}, 400, "Idempotency-Key"),
])
def test_bad_requests_are_refused_and_create_nothing(
        store: SqlStore, servers: tuple[HttpTestServer, HttpTestServer], method: str,
        path: str, kwargs: dict[str, Any], status: int, text: str) -> None:
    fast, slow = servers
    port = free_port()
    with running(store, _items(fast, slow), port):
        reply = requests.request(method, f"http://127.0.0.1:{port}{path}", timeout=30, **kwargs)
    assert reply.status_code == status, reply.text
    assert text in reply.json()["error"]
    assert queries.messages(store) == []


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_an_idempotency_key_belongs_to_its_caller(
        store: SqlStore, servers: tuple[HttpTestServer, HttpTestServer]) -> None:
    fast, slow = servers
    token_a, token_b = new_token(), new_token()
    accounts.add_token(store, "a", "sender", token_digest(token_a), now=utcnow())
    accounts.add_token(store, "b", "sender", token_digest(token_b), now=utcnow())
    port = free_port()
    url = f"http://127.0.0.1:{port}/async/echo"

    def post(token: str, body: Any) -> requests.Response:
        return requests.post(url, json=body, timeout=30, headers={
            "Authorization": f"Bearer {token}", "Idempotency-Key": "order-1"})
    with running(store, _items(fast, slow, auth="token"), port):
        first, again = post(token_a, {"n": 1}), post(token_a, {"n": 1})
        other = post(token_b, {"n": 1})
        conflict = post(token_a, {"n": 2})
    assert first.status_code == again.status_code == other.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert other.json()["id"] != first.json()["id"]  # another caller's key
    assert conflict.status_code == 422 and "another body" in conflict.json()["error"]
    assert len(queries.messages(store, item="Echo")) == 2


def test_basic_and_token_authentication(
        store: SqlStore, servers: tuple[HttpTestServer, HttpTestServer]) -> None:
    fast, slow = servers
    accounts.add_user(store, "alice", "viewer", hash_password("s3cret"), now=utcnow())
    token = new_token()
    accounts.add_token(store, "svc", "sender", token_digest(token), now=utcnow())
    port = free_port()
    items = _items(fast, slow, auth="basic").replace(
        'mode = "async"\nauth = "basic"', 'mode = "async"\nauth = "token"')
    with running(store, items, port):
        base = f"http://127.0.0.1:{port}"
        anonymous = requests.post(f"{base}/echo", json={}, timeout=30)
        wrong = requests.post(f"{base}/echo", json={}, auth=("alice", "nope"), timeout=30)
        right = requests.post(f"{base}/echo", json={"n": 1}, auth=("alice", "s3cret"),
                              timeout=30)
        no_token = requests.post(f"{base}/async/echo", json={}, timeout=30)
        with_token = requests.post(f"{base}/async/echo", json={}, timeout=30,
                                   headers={"Authorization": f"Bearer {token}"})
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Basic")
    assert wrong.status_code == 401 and "wrong user name or password" in wrong.json()["error"]
    assert right.status_code == 200, right.text
    assert no_token.status_code == 401 and "Bearer" in no_token.json()["error"]
    assert with_token.status_code == 202
    assert len(queries.messages(store, item="Echo")) == 2


def test_tls_as_for_the_portal(store: SqlStore, servers: tuple[HttpTestServer, HttpTestServer],
                               tmp_path: Path) -> None:
    fast, slow = servers
    tls = make_tls(tmp_path)
    port = free_port()
    with running(store, _items(fast, slow), port,
                 f'tls_cert = "{tls.server_cert}"\ntls_key = "{tls.server_cert}"'):
        answer = requests.post(f"https://127.0.0.1:{port}/echo", json={"n": 1}, timeout=30,
                               verify=str(tls.ca))
        with pytest.raises(requests.exceptions.SSLError):  # not the CA it trusts
            requests.post(f"https://127.0.0.1:{port}/echo", json={"n": 2}, timeout=30)
        with pytest.raises(requests.ConnectionError):  # the port speaks TLS only
            requests.post(f"http://127.0.0.1:{port}/echo", json={"n": 3}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["json"] == {"n": 1}
    assert len(queries.messages(store, item="Echo")) == 1
