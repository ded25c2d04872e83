"""A production imported from Ensemble runs: the XML export of tests/ensemble_data, pointed at
real loopback servers (a spyne SOAP service, an HTTP server) with its timeouts scaled ÷2.5,
imported, and run by the daemon — the seed timeline holds on the imported SOAP and HTTP
generic operations, on SQLite and PostgreSQL. Exact times belong to the virtual-clock tests;
here we assert the order and generous bounds (as test_seed_realtime.py)."""
from __future__ import annotations

import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.client import send_message, wait_for
from engine.config.production import load_production
from engine.runtime.daemon import Daemon
from engine.store import queries
from engine.store.sql import SqlStore
from engine.tools.ensemble import import_production
from tests.servers import HttpTestServer, SoapTestServer, respond

SOURCE = Path(__file__).parents[1] / "ensemble_data" / "export" / "Demo.Productions.xml"
SCALE = 2.5  # as test_seed_realtime.py: the slack must outlast a loaded machine's wake-ups
SERVER_DELAY = 8 / SCALE  # the seed's 8 s
RESPONSE_TIMEOUT = 7 / SCALE
RETRY_INTERVAL = 10 / SCALE
FAILURE_TIMEOUT = 30 / SCALE
ENV = {"ENCORE_CREDENTIALS_CARDS_USERNAME": "shop", "ENCORE_CREDENTIALS_CARDS_PASSWORD": "s3cret"}


@pytest.fixture
def skeleton_package() -> Iterator[None]:
    """The imported skeleton package is imported from this test's directory only."""
    yield
    for name in [m for m in sys.modules if m.split(".")[0] == "demo_production"]:
        del sys.modules[name]


def _retargeted(text: str, soap: str, http: str, inbound_port: int) -> str:
    """The export as a team would point it at a test bed: servers, ports and timeouts."""
    text = text.replace("payments.example.internal</Setting>", "127.0.0.1</Setting>")
    text = text.replace("orders.example.internal</Setting>", "127.0.0.1</Setting>")
    text = text.replace('Name="HTTPPort">8765<', f'Name="HTTPPort">{soap}<')
    text = text.replace('Name="HTTPPort">8080<', f'Name="HTTPPort">{http}<')
    text = text.replace('Name="Port">9980<', f'Name="Port">{inbound_port}<')
    for name, value in (("ResponseTimeout", RESPONSE_TIMEOUT), ("RetryInterval", RETRY_INTERVAL),
                        ("FailureTimeout", FAILURE_TIMEOUT)):
        seed = {"ResponseTimeout": 7, "RetryInterval": 10, "FailureTimeout": 30}[name]
        text = re.sub(rf'Name="{name}">{seed}<', f'Name="{name}">{value:g}<', text)
    return text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_seed_timeline_holds_on_the_imported_soap_and_http_generic_operations(
        store: SqlStore, tmp_path: Path, skeleton_package: None) -> None:
    slow_http = {"/api/orders": respond(200, b"late", delay=SERVER_DELAY)}
    with SoapTestServer(delay=SERVER_DELAY) as soap, HttpTestServer(slow_http) as http:
        source = tmp_path / "export.xml"
        source.write_text(_retargeted(SOURCE.read_text(encoding="utf-8"), str(soap.port),
                                      str(http.port), _free_port()), encoding="utf-8")
        output = tmp_path / "production.toml"
        import_production(source, name="Demo.Production", output=output).write(output)
        production = load_production(output, env=ENV)
        for item in ("PaymentsSoap", "OrdersHttp"):
            settings = production.item(item).settings
            assert (settings["response_timeout"], settings["retry_interval"],
                    settings["failure_timeout"]) == (RESPONSE_TIMEOUT, RETRY_INTERVAL,
                                                     FAILURE_TIMEOUT)
        daemon = Daemon(production, store=store, env=ENV)
        daemon.start()
        try:
            soap_id = send_message(store, production, "PaymentsSoap",
                                   {"operation": "echo", "args": {"text": "hi"}})
            http_id = send_message(store, production, "OrdersHttp",
                                   {"method": "POST", "path": "/", "json": {"order": 1}})
            rows = {mid: wait_for(store, mid, timeout=40) for mid in (soap_id, http_id)}
        finally:
            daemon.stop()
        assert len(soap.posts) == 4
        assert len([r for r in http.requests if r.path == "/api/orders"]) == 4
    for mid, row in rows.items():
        _assert_seed_timeline(store, mid, row)


def _assert_seed_timeline(store: SqlStore, mid: int, row: Any) -> None:
    assert row is not None and row.status == "Error"
    attempts = store.attempts(mid)
    assert [a.outcome for a in attempts] == ["timeout"] * 4
    starts = [(a.started_at - attempts[0].started_at).total_seconds() for a in attempts]
    assert starts == sorted(starts)
    for k, start in enumerate(starts):  # a retry interval apart, never early
        assert RETRY_INTERVAL * k - 0.05 <= start <= RETRY_INTERVAL * k + 1.15, starts
    for a in attempts:  # each cut at the deadline, never before it
        assert (a.ended_at - a.started_at).total_seconds() >= RESPONSE_TIMEOUT - 0.05
    gave_up = (row.time_completed - attempts[0].started_at).total_seconds()
    assert FAILURE_TIMEOUT + RESPONSE_TIMEOUT - 0.05 <= gave_up <= \
        FAILURE_TIMEOUT + RESPONSE_TIMEOUT + 2.6
    errors = queries.events(store, queries.EventFilter(type="Error", message_id=mid))
    assert len(errors) == 2
    assert f"FailureTimeout of {FAILURE_TIMEOUT:g} seconds exceeded" in errors[1]["text"]
