"""An attempt cut short by kill -9 keeps its server (issue 37): the daemon records the server
an attempt goes to in the write that begins it, and the next server of a failover before its
request leaves — so ``message_attempt.server`` and ``encore show`` answer "which server may
have processed it?" after a crash, on SQLite and PostgreSQL."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from engine.attempt import servers_of
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.servers import HttpTestServer, respond, sequence
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

HELD = 60.0  # seconds the server holds the first request: far longer than the test runs


def closed_port() -> int:
    """A loopback port nobody listens on (a server that refuses: *not sent*)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def production(tmp_path: Path, database_url: str, servers: list[str], *,
               idempotent: bool) -> SqlStore:
    (tmp_path / "production.toml").write_text(
        f'[production]\nname = "T"\ndatabase = "{database_url}"\npoll_interval = 0.05\n'
        'lease_seconds = 3\n\n[[items]]\nname = "Pay"\nclass = "operations.http:HttpOperation"\n'
        f"[items.settings]\nservers = {json.dumps(servers)}\nresponse_timeout = {HELD + 30}\n"
        f"failure_timeout = {HELD + 60}\nretry_interval = 0.2\n"
        f"idempotent = {json.dumps(idempotent)}\nbad_server_cooldown = 60\n")
    encore("db", "upgrade", cwd=tmp_path)
    return SqlStore(database_url)


def bare(servers: list[str]) -> list[str]:
    return [s.rstrip("/") for s in servers]


@pytest.mark.parametrize("idempotent", [
    True,  # attempt 1 begun by the claim: its server is in the claim's statement
    False,  # attempt 1 begun by begin_attempt, durable, before the request
])
def test_an_attempt_cut_short_by_kill_9_keeps_each_server_it_went_to(
        tmp_path: Path, database_url: str, idempotent: bool) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    route = sequence(respond(200, "late", delay=HELD), respond(200, "paid"))
    with HttpTestServer({"/pay": route}) as server:
        store = production(tmp_path, database_url, [dead, server.url], idempotent=idempotent)
        body = json.dumps({"method": "POST", "path": "/pay", "body": "slow-5"})
        mid = int(encore("send", "Pay", "--body", body, cwd=tmp_path).stdout)
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: server.requests, 30, "the request to reach the held server")
            daemon.kill()  # SIGKILL: nothing of the daemon's runs after this
        cut = store.open_attempt(mid)
        assert cut is not None and cut.ended_at is None
        # the refused server first, then the one that holds the request
        assert bare(servers_of(cut.server)) == [dead, server.url]
        shown = encore("show", str(mid), cwd=tmp_path).stdout
        assert " → ".join(servers_of(cut.server)) in shown
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: store.get_message(mid).status in ("Completed", "Suspended"),
                       30, "the message to settle")
            assert daemon.terminate() == 0
    first = store.attempts(mid)[0]
    # recovered as outcome unknown, and still naming where it went
    assert first.error_text.startswith("outcome unknown")
    assert bare(servers_of(first.server)) == [dead, server.url]
    assert store.get_message(mid).status == ("Completed" if idempotent else "Suspended")
    store.dispose()
