"""The production's life in the event log, and dead means dead (docs/operating.md, "The
production's life"; docs/architecture.md, "Fencing"): real ``encore run`` processes on SQLite
and PostgreSQL, started, reloaded by SIGHUP, stopped by SIGTERM, killed with SIGKILL and
restarted while the killed one is still a zombie."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from engine.runtime.liveness import pid_namespace
from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.servers import HttpTestServer, respond, sequence
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

LEASE = 30  # seconds: lease_seconds, so that a recovery at lease expiry could not pass
RECOVERY_BOUND = 10.0  # seconds from the restart's spawn: well under LEASE, generous on load
SLOW = 60.0  # seconds the first call hangs: the killed daemon holds it


def write_production(tmp_path: Path, url: str, items: str, *, lease: float = LEASE) -> None:
    (tmp_path / "production.toml").write_text(
        f'[production]\nname = "Life"\ndatabase = "{url}"\npoll_interval = 0.05\n'
        f"lease_seconds = {lease}\nshutdown_timeout = 5\n{items}")


def http_item(name: str, url: str, **settings: object) -> str:
    body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    return (f'\n[[items]]\nname = "{name}"\nclass = "operations.http:HttpOperation"\n'
            f'[items.settings]\nurl = "{url}"\n{body}')


def lifecycle(store: SqlStore) -> list[dict[str, Any]]:
    return queries.events(store, queries.EventFilter(lifecycle=True))


def texts(store: SqlStore) -> list[str]:
    return [e["text"] for e in lifecycle(store)]


def has(store: SqlStore, fragment: str) -> bool:
    return any(fragment in t for t in texts(store))


def daemon_id(store: SqlStore, pid: int) -> str:
    (found,) = [d["id"] for d in queries.daemons(store) if d["pid"] == pid]
    return str(found)


def state_of(pid: int) -> str:
    """The state letter of process ``pid`` (``Z``: a zombie)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2]


@pytest.fixture
def store(database_url: str, tmp_path: Path) -> Any:
    write_production(tmp_path, database_url, "")
    encore("db", "upgrade", cwd=tmp_path)
    s = SqlStore(database_url)
    yield s
    s.dispose()


def test_start_reloads_applied_and_refused_and_sigterm_are_in_the_event_log(
        store: SqlStore, database_url: str, tmp_path: Path) -> None:
    with HttpTestServer({"/ok": respond(200, "ok"), "/down": respond(503)}) as server:
        write_production(tmp_path, database_url, http_item("A", server.url))
        failing = http_item("Failing", server.url, failure_timeout=0)
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: has(store, "production Life started"), 30, "the start event")
            me = daemon_id(store, daemon.proc.pid)
            write_production(tmp_path, database_url, http_item("A", server.url) + failing)
            daemon.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: has(store, "production reloaded"), 30, "the reload event")
            send = json.dumps({"method": "GET", "path": "/down"})
            encore("send", "Failing", "--body", send, cwd=tmp_path)  # an Error, not life
            wait_until(lambda: queries.events(store, queries.EventFilter(type="Error")), 30,
                       "the failing message's Error")
            (tmp_path / "production.toml").write_text(
                (tmp_path / "production.toml").read_text()
                + '\n[[items]]\nname = "Broken"\nclass = "operations.nowhere:Nothing"\n')
            daemon.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: has(store, "reload refused"), 30, "the refusal event")
            assert daemon.terminate() == 0
    rows = lifecycle(store)
    mine = [(e["type"], e["source_method"], e["text"]) for e in rows if e["job"] == me]
    assert [(t, m) for t, m, _ in mine if m != "lead"] == [
        ("Info", "start"), ("Info", "reload"), ("Error", "reload"), ("Info", "stop")]
    assert ("Info", "lead", f"daemon {me} took lease leader") in mine
    start, applied, refused, stop = [x for _, m, x in mine if m != "lead"]
    assert f"daemon {me}" in start and "1 item(s)" in start
    assert "started Failing" in applied and "2 item(s) running" in applied
    assert "operations.nowhere" in refused
    assert stop == f"production Life stopped: daemon {me}, on SIGTERM"
    assert not any("Failing" in (e["config_name"] or "") and e["type"] == "Error"
                   for e in rows)  # a message's failure is not the production's life
    shown = encore("log", "--lifecycle", "--all", cwd=tmp_path).stdout
    assert "daemon" in shown.splitlines()[0] and shown.count(me) >= 4
    assert "reload refused" in shown and "on SIGTERM" in shown
    assert "FailureTimeout" not in shown


@pytest.mark.parametrize("zombie", [
    # the killed daemon's parent has not reaped it: kill(pid, 0) still succeeds
    True,
    # reaped: its PID is gone
    False,
])
def test_a_daemon_restarted_right_after_a_kill_recovers_the_messages_at_once(
        store: SqlStore, database_url: str, tmp_path: Path, zombie: bool) -> None:
    route = sequence(respond(200, "first", delay=SLOW), respond(200, "second"))
    with HttpTestServer({"/pay": route}) as server:
        write_production(tmp_path, database_url, http_item(
            "Pay", server.url, idempotent=True, response_timeout=SLOW + 30,
            retry_interval=0.2))
        mid = int(encore("send", "Pay", "--body", json.dumps({"method": "GET", "path": "/pay"}),
                         cwd=tmp_path).stdout)
        with RunningDaemon(tmp_path) as first:
            wait_until(lambda: server.requests, 30, "the first call to reach the server")
            dead = daemon_id(store, first.proc.pid)
            first.proc.send_signal(signal.SIGKILL)  # Popen: not reaped until wait()
            time.sleep(0.2)
            if zombie:
                assert state_of(first.proc.pid) == "Z"
            else:
                first.wait(10)
            spawned = time.monotonic()
            with RunningDaemon(tmp_path) as second:
                wait_until(lambda: len(server.requests) >= 2, LEASE,
                           "the held message to be sent again")
                recovered_after = time.monotonic() - spawned
                wait_until(lambda: store.get_message(mid).status == "Completed", 30,
                           "the message to complete")
                assert second.terminate() == 0
            if zombie:
                first.wait(10)  # reaped at last
    assert recovered_after < RECOVERY_BOUND, recovered_after
    rows = lifecycle(store)
    (recovery,) = [e for e in rows if e["source_method"] == "recover"]
    why = f"pid {first.proc.pid} {'a zombie' if zombie else 'gone'}"
    assert recovery["type"] == "Warning" and recovery["job"] != dead
    assert recovery["text"] == (f"daemon {dead} died ({why}); 1 message(s) it held are back "
                                "in their queues, its leases released: item:Pay, leader")
    leaders = [e["job"] for e in rows if e["source_method"] == "lead"]
    assert leaders == [dead, recovery["job"]]  # the leadership changed hands, on record


def test_encore_status_says_a_killed_daemon_is_not_alive_zombie_or_gone(
        store: SqlStore, database_url: str, tmp_path: Path) -> None:
    write_production(tmp_path, database_url, "")
    with RunningDaemon(tmp_path) as daemon:
        wait_until(lambda: has(store, "production Life started"), 30, "the start event")
        pid = daemon.proc.pid
        daemon.proc.send_signal(signal.SIGKILL)
        wait_until(lambda: state_of(pid) == "Z", 10, "the daemon to be a zombie")
        as_zombie = encore("status", cwd=tmp_path).stdout
        daemon.wait(10)
        as_gone = encore("status", cwd=tmp_path).stdout
    row = [line for line in as_zombie.splitlines() if f" {pid} " in line]
    assert row and f"no (pid {pid} a zombie)" in row[0]  # its heartbeat is fresh
    row = [line for line in as_gone.splitlines() if f" {pid} " in line]
    assert row and f"no (pid {pid} gone)" in row[0]


def test_every_heartbeat_scans_for_dead_daemons_of_this_host(
        store: SqlStore, database_url: str, tmp_path: Path) -> None:
    write_production(tmp_path, database_url, "", lease=3)  # a heartbeat every second
    child = subprocess.Popen(["sleep", "60"])
    try:
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: has(store, "production Life started"), 30, "the start event")
            me = daemon_id(store, daemon.proc.pid)
            # a peer registered after the start's scan, whose process is alive...
            store.register_daemon("peer", host=socket.gethostname(), pid=child.pid,
                                  production="Life", items="", now=store.db_now(),
                                  pid_namespace=pid_namespace())
            time.sleep(2.5)  # ...for over two heartbeats: not forgotten
            assert not has(store, "daemon peer")
            child.kill()  # now a zombie: the test does not reap it yet
            wait_until(lambda: has(store, "daemon peer died"), 10, "a heartbeat's scan")
            assert daemon.terminate() == 0
    finally:
        child.kill()
        child.wait()
    (event,) = [e for e in lifecycle(store) if e["source_method"] == "recover"]
    assert event["job"] == me
    assert event["text"] == f"daemon peer died (pid {child.pid} a zombie); 0 message(s) it " \
                            "held are back in their queues"
    assert "peer" not in [d["id"] for d in queries.daemons(store)]
