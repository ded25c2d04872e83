"""The portal served by uvicorn on loopback: racing intake calls with one Idempotency-Key
(SQLite and PostgreSQL), the portal inside the daemon, and the warning for a portal that
listens beyond loopback without TLS."""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import requests
from sqlalchemy import select

from engine.config.production import PortalConfig, parse_production
from engine.portal.server import PortalServer, is_loopback, warn_if_exposed
from engine.runtime.daemon import Daemon
from engine.store.models import event_log, message_header
from engine.store.sql import SqlStore
from tests.portal_support import PRODUCTION, add_token, bearer, production

RACERS = 50  # concurrent intake calls with the same key
HTTP_TIMEOUT = 30  # seconds one call may take on a loaded machine


def portal(**table: object) -> PortalConfig:
    """The [portal] table ``table``, the rest its defaults."""
    return PortalConfig.from_validated(table)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(store: SqlStore) -> Iterator[str]:
    server = PortalServer(store, production(store.url), portal(port=free_port()),
                          env={})
    server.start()
    yield server.url
    server.stop()


def test_racing_intake_calls_with_one_idempotency_key_create_exactly_one_message(
        store: SqlStore, served: str) -> None:
    headers = {**bearer(add_token(store, "sender")), "Idempotency-Key": "race-1"}
    barrier = threading.Barrier(RACERS)
    answers: list[tuple[int, dict[str, int]]] = []
    lock = threading.Lock()

    def post() -> None:
        with requests.Session() as http:
            barrier.wait()
            response = http.post(f"{served}/api/v1/messages/Echo", headers=headers,
                                 json={"text": "once"}, timeout=HTTP_TIMEOUT)
        with lock:
            answers.append((response.status_code, response.json()))

    threads = [threading.Thread(target=post) for _ in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HTTP_TIMEOUT * 2)
    with store.engine.connect() as conn:
        rows = conn.execute(select(message_header.c.id, message_header.c.idempotency_key)).all()
    assert len(answers) == RACERS
    assert {status for status, _ in answers} == {202}
    assert len(rows) == 1 and rows[0].idempotency_key == "race-1"
    assert {body["id"] for _, body in answers} == {rows[0].id}


def test_the_daemon_serves_the_portal_from_its_production_file_and_stops_it(
        store: SqlStore) -> None:
    port = free_port()
    text = PRODUCTION + f"\n[portal]\nport = {port}\n"
    prod = parse_production(text, env={"ENCORE_DATABASE_URL": store.url})
    daemon = Daemon(prod, store=store, env={})
    daemon.start()
    try:
        login = requests.get(f"http://127.0.0.1:{port}/login", timeout=HTTP_TIMEOUT)
        assert login.status_code == 200 and 'name="username"' in login.text
        status = requests.get(f"http://127.0.0.1:{port}/api/v1/status", timeout=HTTP_TIMEOUT)
        assert status.status_code == 401
    finally:
        daemon.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/login", timeout=HTTP_TIMEOUT)


@pytest.mark.parametrize("config, warned", [
    (portal(host="127.0.0.1"), False),                       # loopback
    (portal(host="::1"), False),                             # loopback, IPv6
    (portal(host="0.0.0.0"), True),                          # every address, in clear
    (portal(host="0.0.0.0", tls_cert="c.pem", tls_key="k.pem"), False),  # with TLS
])
def test_a_portal_beyond_loopback_without_tls_writes_a_warning(
        store: SqlStore, config: PortalConfig, warned: bool) -> None:
    warn_if_exposed(store, config)
    with store.engine.connect() as conn:
        texts = list(conn.execute(select(event_log.c.text)
                                  .where(event_log.c.type == "Warning")).scalars())
    assert bool(texts) == warned
    assert all("without TLS" in t for t in texts)


def test_loopback_means_127_slash_8_ipv6_loopback_and_localhost() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.9.9.9", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "10.1.2.3", "example.com", "::"]))
