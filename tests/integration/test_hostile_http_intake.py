"""HttpService under hostile input, on SQLite and PostgreSQL (docs/security.md): a query that
repeats one parameter 16,000 times (a URL of 64 KB, about the longest the server reads; the
table of values was copied once per value, quadratic: 0.5 s on the event loop, 3.6 s for
40,000) and a large JSON body (decoded on a thread) are taken in, every value kept, while
other calls go on."""
from __future__ import annotations

import json
import threading
import time
from typing import Any

import requests

from engine.client import wait_for
from engine.process import BusinessProcess
from engine.store import queries
from engine.store.sql import SqlStore
from tests.integration.inbound_support import free_port, running

REPEATS = 16_000  # one query parameter, this many times (a URL of 64 KB)
BOUND = 5.0  # seconds: generous, for a loaded machine


class Summary(BusinessProcess):
    """Answers how many values of ``a`` the query held, and the JSON body's length."""

    def on_request(self, request: Any) -> Any:
        values = (request.data.get("query") or {}).get("a", [])
        return {"a": len(values) if isinstance(values, list) else 1,
                "items": len((request.data.get("json") or {}).get("items", []))}


def _items() -> str:
    return f'''
[[items]]
name = "Intake"
class = "engine.inbound:HttpService"
[items.settings]
routes = [{{method = "POST", path = "/sum", target = "Summary"}}]
mode = "sync"
response_timeout = 20
max_body_bytes = 4194304
[[items]]
name = "Summary"
class = "{__name__}:Summary"
'''


def test_a_parameter_repeated_16000_times_and_a_large_json_body_are_taken_in(
        store: SqlStore) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/sum"
    query = "&".join(["a=1"] * REPEATS)
    body = json.dumps({"items": list(range(200_000))})  # 1.3 MB: decoded on a thread
    answers: list[tuple[float, requests.Response]] = []

    def hostile() -> None:
        for send in (lambda: requests.post(f"{url}?{query}", json={}, timeout=60),
                     lambda: requests.post(url, data=body, timeout=60,
                                           headers={"Content-Type": "application/json"})):
            began = time.monotonic()
            reply = send()
            answers.append((time.monotonic() - began, reply))

    with running(store, _items(), port):
        assert requests.post(url, json={}, timeout=30).status_code == 200
        sender = threading.Thread(target=hostile)
        sender.start()
        others = []
        while sender.is_alive() or not others:
            began = time.monotonic()
            assert requests.post(url, json={"items": [1]}, timeout=30).json()["items"] == 1
            others.append(time.monotonic() - began)
        sender.join()
        ids = [m["id"] for m in queries.messages(store) if m["target"] == "Summary"]
        assert all(wait_for(store, i, timeout=30) is not None for i in ids)
    assert [reply.status_code for _, reply in answers] == [200, 200]
    assert answers[0][1].json() == {"a": REPEATS, "items": 0}
    assert answers[1][1].json() == {"a": 0, "items": 200_000}
    assert max(took for took, _ in answers) < BOUND
    assert max(others) < BOUND
