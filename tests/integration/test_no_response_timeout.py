"""``response_timeout = -1`` (Ensemble's "wait for ever") against real loopback servers, on
SQLite and PostgreSQL: the WSDL loads and an attempt waits for a slow answer however long it
takes; a daemon's stop still ends within ``shutdown_timeout`` with such an attempt in
flight. Real time, generous bounds."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from adapters.http import HttpAdapter
from engine.client import send_message, wait_for
from engine.config.production import ProductionConfig, parse_production
from engine.runtime.daemon import Daemon
from engine.store.sql import SqlStore
from tests.servers import HttpTestServer, SoapTestServer, respond
from tests.waiting import wait_until

SLOW = 1.5  # seconds the server takes: longer than any deadline a 0 or a typo could give
HELD = 60.0  # seconds a held server would take: far longer than the stop may
SHUTDOWN = 1.0  # seconds the daemon's stop waits for attempts in flight
MARGIN = 10.0  # seconds past the shutdown timeout a stop may take on a loaded machine


@contextmanager
def running(store: SqlStore, items: str) -> Iterator[tuple[Daemon, ProductionConfig]]:
    production = parse_production(f"[production]\npoll_interval = 0.05\nshutdown_timeout = "
                                  f"{SHUTDOWN}\n{items}", env={})
    daemon = Daemon(production, store=store, env={})
    daemon.start()
    try:
        yield daemon, production
    finally:
        daemon.stop()


def test_an_http_attempt_without_a_limit_waits_for_a_slow_answer() -> None:
    with HttpTestServer({"/slow": respond(200, "late but fine", delay=SLOW)}) as server:
        adapter = HttpAdapter({"url": server.url, "response_timeout": -1}, item_name="Slow")
        adapter.start()
        began = time.monotonic()
        reply = adapter.send("GET", "/slow")
        assert reply.status == 200 and reply.text == "late but fine"
        assert time.monotonic() - began >= SLOW * 0.9


def test_a_soap_item_without_a_limit_loads_its_wsdl_and_completes_a_slow_call(
        store: SqlStore) -> None:
    with SoapTestServer("S", delay=SLOW) as server:
        item = ('[[items]]\nname = "Slow"\nclass = "operations.soap:SoapOperation"\n'
                f'[items.settings]\nwsdl = "{server.wsdl}"\nResponseTimeout = -1\n')
        with running(store, item) as (daemon, production):
            assert daemon.runners["Slow"].ready  # the WSDL loaded, no deadline passed
            mid = send_message(store, production, "Slow",
                               {"operation": "echo", "args": {"text": "x"}})
            row = wait_for(store, mid, timeout=SLOW + MARGIN * 3)
    assert row is not None and row.status == "Completed"
    assert store.get_message(mid).attempts == 1


def test_a_stop_ends_within_the_shutdown_timeout_with_an_unlimited_attempt_in_flight(
        store: SqlStore) -> None:
    with HttpTestServer({"/held": respond(200, "too late", delay=HELD)}) as server:
        item = ('[[items]]\nname = "Held"\nclass = "operations.http:HttpOperation"\n'
                f'[items.settings]\nurl = "{server.url}"\nresponse_timeout = -1\n')
        with running(store, item) as (daemon, production):
            mid = send_message(store, production, "Held", {"method": "GET", "path": "/held"})
            wait_until(lambda: len(server.requests) == 1, 30, "the attempt to reach the server")
            began = time.monotonic()
            daemon.stop()
            stopped = time.monotonic() - began
    assert stopped < SHUTDOWN + MARGIN < HELD
    assert store.get_message(mid).status != "Completed"
