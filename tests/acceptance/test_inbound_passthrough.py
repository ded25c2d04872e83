"""The documented SOAP passthrough (docs/examples/soap-passthrough) in a real ``encore run``
(docs/inbound.md): a zeep client generated from the WSDL the daemon serves calls through the
router and the operation to a real spyne service; and a kill -9 of the daemon during a sync
call leaves the caller with a closed connection and the message to finish after the restart,
nothing lost."""
from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import requests
import zeep

from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.integration.inbound_support import EXAMPLE, free_port
from tests.servers import SoapTestServer
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

START = 60  # seconds a daemon may take to start on a loaded machine


def _example(tmp_path: Path, backend: SoapTestServer, port: int) -> None:
    """The documented production, its backend and port replaced by the test's."""
    shutil.copy(EXAMPLE / "echo.wsdl", tmp_path / "echo.wsdl")
    text = (EXAMPLE / "production.toml").read_text()
    assert 'wsdl = "http://127.0.0.1:8765/?wsdl"' in text and "port = 8081" in text
    text = text.replace("http://127.0.0.1:8765/?wsdl", backend.wsdl).replace(
        "port = 8081", f"port = {port}")
    (tmp_path / "production.toml").write_text(text)
    encore("db", "upgrade", cwd=tmp_path)


def _listening(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


def _messages(tmp_path: Path) -> list[dict[str, Any]]:
    store = SqlStore(f"sqlite:///{tmp_path / 'passthrough.db'}")
    try:
        return queries.messages(store)
    finally:
        store.engine.dispose()


def test_the_documented_passthrough_end_to_end(tmp_path: Path) -> None:
    port = free_port()
    with SoapTestServer("B") as backend:
        _example(tmp_path, backend, port)
        wsdl = f"http://127.0.0.1:{port}/soap/echo?wsdl"
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: _listening(wsdl), START, "the inbound server")
            client = zeep.Client(wsdl)
            assert client.service.echo(text="hello") == "B:hello"
            with pytest.raises(zeep.exceptions.Fault) as fault:
                client.service.refuse(text="no")
            assert daemon.terminate() == 0
    assert "refused: no" in fault.value.message and "Server" in str(fault.value.code)
    requests_ = [m for m in _messages(tmp_path) if m["kind"] == "request"]
    hops = {(m["source"], m["target"]) for m in requests_}
    assert hops == {("EchoService", "EchoRouter"), ("EchoRouter", "EchoBackend")}
    first = min(requests_, key=lambda m: m["id"])
    trace = encore("trace", str(first["id"]), cwd=tmp_path).stdout
    assert "EchoService -> EchoRouter" in trace and "EchoRouter -> EchoBackend" in trace
    # the caller first, with its address and what it asked; what it was answered last
    lines = trace.splitlines()[1:]
    assert re.search(r"caller 127\.0\.0\.1:\d+ -> EchoService: SOAP echo$", lines[0]), trace
    answered = [i for i, line in enumerate(lines)
                if re.search(r"EchoService -> caller 127\.0\.0\.1:\d+ answered: 200 echo", line)]
    completed = [i for i, line in enumerate(lines) if f"message {first['id']} Completed" in line]
    assert answered and completed and answered[0] > completed[0], trace


def test_a_kill_9_during_a_sync_call_loses_nothing(tmp_path: Path) -> None:
    port = free_port()
    with SoapTestServer("S", delay=4.0) as backend:
        _example(tmp_path, backend, port)
        url = f"http://127.0.0.1:{port}/soap/echo"
        envelope = ('<e:Envelope xmlns:e="http://schemas.xmlsoap.org/soap/envelope/" '
                    'xmlns:x="urn:encore:echo"><e:Body><x:echo><x:text>survive</x:text>'
                    '</x:echo></e:Body></e:Envelope>')
        caller: dict[str, Any] = {}

        def call() -> None:
            try:
                caller["reply"] = requests.post(url, data=envelope, timeout=60,
                                                headers={"Content-Type": "text/xml"})
            except requests.RequestException as exc:
                caller["error"] = exc
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: _listening(url + "?wsdl"), START, "the inbound server")
            thread = threading.Thread(target=call)
            thread.start()
            wait_until(lambda: backend.posts, 30, "the backend to be called")
            daemon.kill()  # SIGKILL, mid-call
            thread.join(30)
        assert "reply" not in caller, "the caller got an answer from a killed daemon"
        assert isinstance(caller["error"], requests.ConnectionError)  # connection closed
        assert any(m["status"] not in ("Completed",) for m in _messages(tmp_path))
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: all(m["status"] == "Completed" for m in _messages(tmp_path)
                                   if m["kind"] == "request"), 60, "the messages to finish")
            assert daemon.terminate() == 0
        assert len(backend.posts) == 2  # in flight at the kill: sent again (idempotent)
    requests_ = [m for m in _messages(tmp_path) if m["kind"] == "request"]
    assert {(m["source"], m["target"]) for m in requests_} == {
        ("EchoService", "EchoRouter"), ("EchoRouter", "EchoBackend")}
    assert all(m["status"] == "Completed" for m in requests_)
