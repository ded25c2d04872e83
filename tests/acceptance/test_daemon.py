"""``encore run`` as a real daemon process, driven with ``encore send`` and read from SQL."""
from __future__ import annotations

import json
from pathlib import Path

from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.waiting import wait_until

PRODUCTION = """
[production]
name = "DaemonTest"
database = "{url}"
poll_interval = 0.05

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"
pool_size = 2
"""


def test_the_daemon_delivers_sent_messages_and_stops_gracefully(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    (tmp_path / "production.toml").write_text(PRODUCTION.format(url=url))
    encore("db", "upgrade", cwd=tmp_path)
    ids = [int(encore("send", "Echo", "--body", json.dumps({"text": f"m{i}"}),
                      cwd=tmp_path).stdout) for i in range(3)]
    store = SqlStore(url)
    with RunningDaemon(tmp_path) as daemon:
        wait_until(lambda: all(store.get_message(i).status == "Completed" for i in ids), 30,
                   "the messages to complete")
        reply = encore("send", "Echo", "--body", '{"text": "sync"}', "--wait", "20",
                       cwd=tmp_path)
        assert json.loads(reply.stdout) == {"text": "SYNC", "count": 1}  # the response alone
        sync_id = int(reply.stderr.splitlines()[0])  # the id goes to stderr
        answer = json.loads(encore("send", "Echo", "--body", '{"text": "js"}', "--wait", "20",
                                   "--json", cwd=tmp_path).stdout)
        assert answer == {"id": answer["id"], "status": "Completed",
                          "response": {"text": "JS", "count": 1}}
        assert answer["id"] > sync_id and store.get_message(answer["id"]).kind == "request"
        status = encore("status", cwd=tmp_path).stdout
        assert "DaemonTest" in status and "no daemon running" not in status
        assert daemon.terminate() == 0
    assert "stopped" in daemon.output
    for mid in ids:
        row = store.get_message(mid)
        response = store.get_message(row.corresponding_id)
        assert response.kind == "response" and response.corresponding_id == mid
        assert json.loads(response.body)["text"] == f"M{mid - ids[0]}"
        assert [a.outcome for a in store.attempts(mid)] == ["ok"]
    assert "no daemon running" in encore("status", cwd=tmp_path).stdout
    store.dispose()


SOAP_AND_HTTP = """
[production]
name = "Delivery"
database = "{url}"
poll_interval = 0.05

[[items]]
name = "Soap"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "{wsdl}"
trace = true

[[items]]
name = "Http"
class = "operations.http:HttpOperation"
[items.settings]
url = "{http}"
trace = true
"""


def test_send_and_run_deliver_a_soap_and_an_http_message_to_real_servers(
        tmp_path: Path) -> None:
    from tests.servers import HttpTestServer, SoapTestServer, respond

    url = f"sqlite:///{tmp_path / 'e.db'}"
    with SoapTestServer("S") as soap, \
            HttpTestServer({"POST /orders": respond(201, '{"order": 7}')}) as http:
        (tmp_path / "production.toml").write_text(
            SOAP_AND_HTTP.format(url=url, wsdl=soap.wsdl, http=http.url))
        encore("db", "upgrade", cwd=tmp_path)
        soap_id = int(encore("send", "Soap", "--body",
                             '{"operation": "echo", "args": {"text": "hello"}}',
                             cwd=tmp_path).stdout)
        http_id = int(encore("send", "Http", "--body",
                             '{"method": "POST", "path": "/orders", "json": {"sku": "A1"}}',
                             cwd=tmp_path).stdout)
        store = SqlStore(url)
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: all(store.get_message(i).status == "Completed"
                                   for i in (soap_id, http_id)), 30, "both deliveries")
            assert daemon.terminate() == 0
        assert json.loads(http.requests[0].body) == {"sku": "A1"}
        assert len(soap.posts) == 1
    soap_reply = store.get_message(store.get_message(soap_id).corresponding_id)
    http_reply = store.get_message(store.get_message(http_id).corresponding_id)
    assert json.loads(soap_reply.body) == {"result": "S:hello"}
    assert json.loads(http_reply.body)["status"] == 201
    assert json.loads(json.loads(http_reply.body)["body"]) == {"order": 7}
    for mid in (soap_id, http_id):
        (attempt,) = store.attempts(mid)
        assert attempt.outcome == "ok" and attempt.server
        log = json.loads(encore("log", "--message", str(mid), "--json",
                                cwd=tmp_path).stdout.splitlines()[0])
        assert log["type"] == "Trace" and "attempt 1" in log["text"]
    store.dispose()


def test_the_demo_plays_the_seed_scenario_on_the_embedded_sqlite_default(
        tmp_path: Path) -> None:
    out = encore("demo", cwd=tmp_path).stdout
    assert (tmp_path / "encore.db").exists()
    store = SqlStore(f"sqlite:///{tmp_path / 'encore.db'}")
    fast, slow = store.get_message(1), store.get_message(2)
    assert (fast.status, slow.status, slow.attempts) == ("Completed", "Error", 4)
    errors = [line for line in out.splitlines() if "event log: Error" in line]
    assert len(errors) == 2 and "FailureTimeout of 3 seconds exceeded" in errors[1]
    assert "SELECT" in out and "encore -p demo.toml trace 2" in out
    store.dispose()
