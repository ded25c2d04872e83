"""Inbound Idempotency-Keys belong to their caller whatever the names hold (issue 36,
finding 8), on SQLite and PostgreSQL: the caller used to be joined into the stored key with
``:``, so token ``tsend:x`` with key ``k1`` replayed token ``tsend``'s message sent with key
``x:k1`` (its answer, and a 422 naming its id for another body)."""
from __future__ import annotations

from typing import Any

import pytest
import requests

from engine.clock import utcnow
from engine.inbound.calls import Caller, scoped_key
from engine.process import BusinessProcess
from engine.serving.auth import new_token, token_digest
from engine.store import accounts, queries
from engine.store.sql import SqlStore
from tests.integration.inbound_support import free_port, running

HTTP_TIMEOUT = 30  # seconds one call may take on a loaded machine
LONG = "k" * 190  # a key whose scoped form is digested (over the column's 200 characters)


class Sink(BusinessProcess):
    """Takes any message and answers nothing."""

    def on_request(self, request: Any) -> Any:
        return None


ITEMS = f'''
[[items]]
name = "In"
class = "engine.inbound:HttpService"
[items.settings]
routes = [{{method = "POST", path = "/in", target = "Sink"}}]
mode = "async"
auth = "token"

[[items]]
name = "Sink"
class = "{__name__}:Sink"
'''


@pytest.mark.parametrize("first, second", [
    (("tsend", "x:k1"), ("tsend:x", "k1")),  # the finding: the colon moved into the name
    (("tsend:x", "k1"), ("tsend", "x:k1")),  # ... and the other way round
    (("a", "b:c:d"), ("a:b:c", "d")),  # more colons
    (("tsend", "x:" + LONG), ("tsend:x", LONG)),  # both digested
])
def test_callers_whose_name_and_key_join_alike_send_two_messages(
        store: SqlStore, first: tuple[str, str], second: tuple[str, str]) -> None:
    tokens = {}
    for name, _ in (first, second):
        tokens[name] = new_token()
        accounts.add_token(store, name, "sender", token_digest(tokens[name]), now=utcnow())
    port = free_port()

    def post(name: str, key: str, body: Any) -> requests.Response:
        return requests.post(f"http://127.0.0.1:{port}/in", json=body, timeout=HTTP_TIMEOUT,
                             headers={"Authorization": f"Bearer {tokens[name]}",
                                      "Idempotency-Key": key})
    with running(store, ITEMS, port):
        one = post(*first, {"from": first[0]})
        other = post(*second, {"from": second[0]})  # another body: was a 422 naming one's id
        again = post(*first, {"from": first[0]})
    assert one.status_code == other.status_code == again.status_code == 202, other.text
    assert other.json()["id"] != one.json()["id"]
    assert "idempotent-replayed" not in other.headers
    assert again.json()["id"] == one.json()["id"]  # the key still works for its own caller
    assert again.headers["idempotent-replayed"] == "true"
    assert len(queries.messages(store, item="Sink")) == 2


def test_a_scoped_key_escapes_the_service_and_the_caller_and_keeps_the_key_as_sent() -> None:
    caller = Caller("127.0.0.1", 5000, "token:tsend:x")
    assert scoped_key("In:1", caller, "k1") == "inbound:In%3A1:token%3Atsend%3Ax:k1"
    assert scoped_key("In", Caller("::1", 5000), "a:b") == "inbound:In:host%3A%3A%3A1:a:b"
    digested = scoped_key("In", caller, LONG)
    assert digested is not None and digested.startswith("inbound:In:sha256:")
    assert len(digested) <= 200
