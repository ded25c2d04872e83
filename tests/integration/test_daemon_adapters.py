"""Adapter behaviour through the daemon (docs/retries.md and docs/security.md), on SQLite
(dialect-free; the health check's database error also on PostgreSQL): failover across
three SOAP servers (seed 003, scaled), a WSDL that loads late, credentials that never reach
a table or a log line, and the metrics endpoint."""
from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
import requests
from sqlalchemy import MetaData, select

from engine.client import send_message, wait_for
from engine.config.production import ProductionConfig, parse_production
from engine.errors import StoreError
from engine.runtime.daemon import Daemon
from engine.store import queries
from engine.store.sql import SqlStore
from tests.servers import HttpTestServer, SoapTestServer, respond, soap_reply, soap_wsdl, soap_xml
from tests.waiting import wait_until

pytestmark = pytest.mark.dialect_free

SLOW = 1.1  # seconds each failover server takes (the seed's 11 s, ÷10)


@contextmanager
def running(store: SqlStore, text: str, env: dict[str, str] | None = None
            ) -> Iterator[tuple[Daemon, ProductionConfig]]:
    if not text.startswith("[production]"):
        text = "[production]\n" + text
    text = text.replace("[production]\n", "[production]\npoll_interval = 0.05\n", 1)
    production = parse_production(text, env={})
    daemon = Daemon(production, store=store, env=env or {})
    daemon.start()
    try:
        yield daemon, production
    finally:
        daemon.stop()


def soap_item(name: str, servers: list[str], wsdl: str, **settings: Any) -> str:
    extra = "".join(f"{k} = {v!r}\n".replace("'", '"').replace("True", "true")
                    .replace("False", "false") for k, v in settings.items())
    listed = ", ".join(f'"{s}"' for s in servers)
    return (f'[[items]]\nname = "{name}"\nclass = "operations.soap:SoapOperation"\n'
            f'[items.settings]\nwsdl = "{wsdl}"\nservers = [{listed}]\n{extra}')


# Real time, so generous bounds: the exact seed timeline (failure_timeout 3.5) is asserted on
# the virtual clock. Here the failure timeout leaves each of the three retries 0.3 s of
# slack on a loaded machine (the fourth attempt starts before 3.9 s, a fifth never could).
@pytest.mark.parametrize(("idempotent", "attempts", "servers", "give_up"), [
    # idempotent: four attempts on A, B, C, A; give up after the fourth (4 × ~1 s >= 3.9)
    (True, 4, ["A", "B", "C", "A"], (3.9, 6.0)),
    # not idempotent: one attempt, error near 1 s
    (False, 1, ["A"], (0.95, 1.5)),
])
def test_seed_003_failover_across_three_soap_servers(
        store: SqlStore, idempotent: bool, attempts: int, servers: list[str],
        give_up: tuple[float, float]) -> None:
    with ExitStack() as stack:
        nodes = [stack.enter_context(SoapTestServer(n, delay=SLOW)) for n in "ABC"]
        item = soap_item("Cluster", [n.url for n in nodes], nodes[0].wsdl,
                         response_timeout=1.0, retry_interval=0, failure_timeout=3.9,
                         idempotent=idempotent)
        with running(store, item) as (_, production):
            mid = send_message(store, production, "Cluster",
                               {"operation": "echo", "args": {"text": "pay"}})
            row = wait_for(store, mid, timeout=20)
        names = {n.url: n.name for n in nodes}
    assert row is not None and row.status == "Error"
    rows = store.attempts(mid)
    assert [names[a.server.rstrip("/")] if a.server.rstrip("/") in names else a.server
            for a in rows] == servers
    elapsed = (row.time_completed - rows[0].started_at).total_seconds()
    assert give_up[0] <= elapsed <= give_up[1]
    if not idempotent:
        assert "may have been processed" in row.error_text


def test_a_server_fault_retried_by_an_ensemble_style_rule(store: SqlStore) -> None:
    with SoapTestServer("F") as spyne:
        item = soap_item("Ledger", [], spyne.wsdl, reply_code_actions="E#Server=R",
                         retry_interval=0.2, failure_timeout=2.0)
        with running(store, item) as (_, production):
            mid = send_message(store, production, "Ledger",
                               {"operation": "fail", "args": {"text": "x"}})
            row = wait_for(store, mid, timeout=10)
    assert row is not None and row.status == "Error"
    attempts = store.attempts(mid)
    assert len(attempts) >= 2 and {a.outcome for a in attempts} == {"fault"}
    assert "soap11env:Server" in attempts[0].error_text
    assert "FailureTimeout" in row.error_text


def test_a_redirect_not_followed_ends_the_message_in_error_naming_the_location(
        store: SqlStore) -> None:
    with HttpTestServer({"/pay": respond(302, "", headers={"Location": "/v2/pay"})}) as server:
        item = ('[[items]]\nname = "Shop"\nclass = "operations.http:HttpOperation"\n'
                f'[items.settings]\nurl = "{server.url}"\nretry_interval = 0.1\n'
                'failure_timeout = 5\n')
        with running(store, item) as (_, production):
            mid = send_message(store, production, "Shop", {"method": "POST", "path": "/pay"})
            row = wait_for(store, mid, timeout=10)
    assert row is not None and row.status == "Error" and "/v2/pay" in row.error_text
    (attempt,) = store.attempts(mid)  # not retryable: one attempt, long before 5 s
    assert (attempt.outcome, attempt.status_code) == ("http_status", 302)
    assert len(server.requests) == 1


class Switch:
    """A route that answers 503 until switched on, then serves the WSDL."""

    def __init__(self) -> None:
        self.on = threading.Event()
        self.off_route, self.on_route = respond(503, "not yet"), soap_wsdl("/soap")

    def __call__(self, handler: Any, record: Any) -> None:
        (self.on_route if self.on.is_set() else self.off_route)(handler, record)


def test_a_wsdl_that_cannot_load_keeps_messages_queued_until_it_can(store: SqlStore) -> None:
    """One Error when it first fails, nothing while it keeps failing, one Info when it loads
    (the ten-minute reminders are timed on a virtual clock, tests/unit/test_readiness.py)."""
    switch = Switch()
    routes = {"GET /soap": switch, "POST /soap": soap_xml(200, soap_reply("late but fine"))}
    with HttpTestServer(routes) as server:
        item = ('[[items]]\nname = "Late"\nclass = "operations.soap:SoapOperation"\n'
                f'[items.settings]\nwsdl = "{server.url}/soap?wsdl"\nretry_interval = 0.2\n')
        with running(store, item) as (daemon, production):
            mid = send_message(store, production, "Late",
                               {"operation": "echo", "args": {"text": "x"}})
            wait_until(lambda: len(fetches(server)) >= 4, 20, "four tries to load the WSDL")
            assert store.get_message(mid).status == "Queued"  # still queued, daemon alive
            switch.on.set()
            row = wait_for(store, mid, timeout=20)
            assert daemon.health()[0]
    assert row is not None and row.status == "Completed"
    events = queries.events(store, queries.EventFilter(item="Late"))
    assert [e["type"] for e in events] == ["Error", "Info"], events
    assert "not ready" in events[0]["text"] and "503" in events[0]["text"]
    assert "adapter ready after" in events[1]["text"]


def fetches(server: HttpTestServer) -> list[Any]:
    return [r for r in server.requests if r.method == "GET"]


PASSWORD = "s3cr3t-Pa55word-9f1c"


def test_credentials_never_reach_a_table_or_the_log(store: SqlStore,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    routes = {"/secure": respond(401, f"bad credentials for user alice, pw {PASSWORD}")}
    env = {"ENCORE_CREDENTIALS_BANK_USERNAME": "alice",
           "ENCORE_CREDENTIALS_BANK_PASSWORD": PASSWORD}
    with HttpTestServer(routes) as server:
        item = ('[[items]]\nname = "Bank"\nclass = "operations.http:HttpOperation"\n'
                f'[items.settings]\nurl = "{server.url}"\ncredentials = "bank"\n'
                'trace = true\nalert_on_error = true\nfailure_timeout = 0\n')
        with running(store, item, env=env) as (_, production):
            mid = send_message(store, production, "Bank", {"method": "GET", "path": "/secure"})
            row = wait_for(store, mid, timeout=10)
        assert "Authorization" in server.requests[0].headers
    assert row is not None and row.status == "Error"
    meta = MetaData()
    meta.reflect(store.engine)
    with store.engine.connect() as conn:
        for table in meta.sorted_tables:
            for record in conn.execute(select(table)):
                assert PASSWORD not in repr(tuple(record)), table.name
    assert PASSWORD not in caplog.text
    assert "alice" in row.error_text or "401" in row.error_text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_metrics_endpoint_reports_attempts_and_queue_depth(store: SqlStore) -> None:
    port = free_port()
    with HttpTestServer({"/ok": respond(200, "ok"), "/down": respond(503)}) as server:
        item = (f"[production]\nmetrics_port = {port}\n"
                '[[items]]\nname = "Web"\nclass = "operations.http:HttpOperation"\n'
                f'[items.settings]\nurl = "{server.url}"\nfailure_timeout = 0\n')
        with running(store, item) as (_, production):
            ids = [send_message(store, production, "Web", {"method": "GET", "path": p})
                   for p in ("/ok", "/down", "/ok")]
            for mid in ids:
                wait_for(store, mid, timeout=10)
            base = f"http://127.0.0.1:{port}"
            scrape = requests.get(base + "/metrics", timeout=5).text
            health = requests.get(base + "/healthz", timeout=5)
    assert 'encore_attempts_total{item="Web",outcome="ok"} 2' in scrape
    assert 'encore_attempts_total{item="Web",outcome="http_status"} 1' in scrape
    assert 'encore_give_ups_total{item="Web"} 1' in scrape
    assert 'encore_queue_depth{item="Web"} 0' in scrape
    assert 'encore_attempt_seconds_count{item="Web"} 3' in scrape
    assert health.status_code == 200 and health.text.strip() == "ok"


def test_metrics_beyond_loopback_write_a_warning_at_start(store: SqlStore) -> None:
    port = free_port()
    with running(store, f'[production]\nmetrics_port = {port}\nmetrics_host = "0.0.0.0"\n'):
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    (warning,) = queries.events(store, queries.EventFilter(type="Warning"))
    assert f"metrics endpoint listens on 0.0.0.0:{port}, beyond loopback" in warning["text"]
    assert (warning["source_class"], warning["source_method"]) == ("Daemon", "start")


def test_metrics_on_loopback_write_no_warning(store: SqlStore) -> None:
    with running(store, f"[production]\nmetrics_port = {free_port()}\n"):
        pass
    assert queries.events(store, queries.EventFilter(type="Warning")) == []


DRIVER_DETAILS = 'connection to server at "10.1.2.3", port 5432 failed: password for "encore"'


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_healthz_says_database_unavailable_without_the_drivers_details(
        store: SqlStore, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    with running(store, f"[production]\nmetrics_port = {port}\n") as (daemon, _):
        def unavailable(*_: Any) -> Any:
            raise StoreError(DRIVER_DETAILS)

        monkeypatch.setattr("engine.runtime.daemon.queries.daemons", unavailable)
        health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        monkeypatch.undo()
    assert (health.status_code, health.text) == (503, "database unavailable\n")
    assert DRIVER_DETAILS in caplog.text  # for the operator, in the daemon's log
