"""Clients that go away in the middle of their body (issue 36, finding 6): a flood of them,
to an inbound HTTP service, an inbound SOAP service and the portal's login, over uvicorn on
loopback. Each is counted; the log gets no traceback and at most one line a minute (the
process's repeat filter), where a slow-body flood used to write a traceback per client."""
from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from engine.config.production import PortalConfig
from engine.portal.server import PortalServer
from engine.process import BusinessProcess
from engine.serving.client_gone import clients_gone
from engine.store.sql import SqlStore
from tests.integration.inbound_support import free_port, running, soap_service
from tests.portal_support import production
from tests.waiting import wait_until

CLIENTS = 200  # clients that go away mid-body
SENDERS = 4  # threads sending them
ADDRESSES = 20  # loopback addresses they come from: 10 each, under any per-client cap
DECLARED = 10_000  # bytes each declares in Content-Length
SENT = b'{"half": '  # ... of which it sends these, then closes
WAIT = 60  # seconds the server may take to see them all gone, on a loaded machine
# lines in the log at most: the flood's first, and the count of the others if a minute of
# the process's repeat filter ends during the test (it lasts well under a minute)
MOST_LINES = 2


class Sink(BusinessProcess):
    """Takes any message and answers nothing."""

    def on_request(self, request: Any) -> Any:
        return None


SINK = f'[[items]]\nname = "Sink"\nclass = "{__name__}:Sink"\n'
HTTP_SERVICE = '''
[[items]]
name = "In"
class = "engine.inbound:HttpService"
[items.settings]
routes = [{method = "POST", path = "/in", target = "Sink"}]
mode = "async"
'''


class Captured(logging.Handler):
    """The WARNING and above records that reach the root logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Iterator[Captured]:
    handler = Captured()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


@contextmanager
def inbound(tmp_path: Path, items: str) -> Iterator[tuple[int, str]]:
    store = SqlStore(f"sqlite:///{tmp_path / 'encore.db'}")
    store.upgrade()
    port = free_port()
    try:
        with running(store, items + SINK, port):
            yield port, "text/xml" if "SoapService" in items else "application/json"
    finally:
        store.dispose()


@contextmanager
def portal(tmp_path: Path) -> Iterator[tuple[int, str]]:
    store = SqlStore(f"sqlite:///{tmp_path / 'encore.db'}")
    store.upgrade()
    port = free_port()
    server = PortalServer(store, production(store.url), PortalConfig.from_validated(
        {"port": port}), env={})
    server.start()
    try:
        yield port, "application/x-www-form-urlencoded"
    finally:
        server.stop()
        store.dispose()


def go_away_mid_body(port: int, path: str, content_type: str, sender: int) -> None:
    """This sender's share of the clients, each a connection that sends its head and part
    of its body, then closes."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {DECLARED}\r\n\r\n").encode()
    for n in range(sender, CLIENTS, SENDERS):
        address = f"127.0.0.{2 + n % ADDRESSES}"
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT,
                                      source_address=(address, 0)) as sock:
            sock.sendall(head + SENT)


SERVERS = {
    "inbound http": (lambda tmp: inbound(tmp, HTTP_SERVICE), "/in"),
    "inbound soap": (lambda tmp: inbound(tmp, soap_service(target="Sink")), "/soap/echo"),
    "portal login": (portal, "/login"),
}


@pytest.mark.parametrize("server", list(SERVERS))
def test_a_flood_of_clients_gone_mid_body_is_counted_and_logged_at_most_once_a_minute(
        tmp_path: Path, captured: Captured, server: str) -> None:
    start, path = SERVERS[server]
    with start(tmp_path) as (port, content_type):
        before = clients_gone()
        senders = [threading.Thread(target=go_away_mid_body,
                                    args=(port, path, content_type, sender))
                   for sender in range(SENDERS)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(WAIT)
        wait_until(lambda: (clients_gone() - before >= CLIENTS
                            or len(captured.records) > MOST_LINES), WAIT,
                   f"{CLIENTS} clients counted gone")
        lines = list(captured.records)
    assert [r.getMessage() for r in lines if r.exc_info] == []  # was one traceback a client
    assert len(lines) <= MOST_LINES, [r.getMessage() for r in lines]
    assert all("went away before its request was read" in r.getMessage() for r in lines)
    assert clients_gone() - before == CLIENTS
