"""The production's life as events, and how a daemon of this host is judged dead, on SQLite
and PostgreSQL (docs/operating.md, "The production's life"; docs/architecture.md,
"Fencing")."""
from __future__ import annotations

import os
import socket
import subprocess
from datetime import timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

from engine.clock import utcnow
from engine.config.production import parse_production
from engine.errors import EncoreError
from engine.portal import create_app
from engine.runtime.cluster import forget_daemon, reap_dead_local_daemons
from engine.runtime.daemon import Daemon
from engine.runtime.lifecycle import LifecycleLog, LifeStep
from engine.runtime.liveness import pid_namespace, process_start, why_dead
from engine.store import migrate, queries
from engine.store.operator import disable_item, enable_item
from engine.store.sql import SqlStore
from migrations import HEAD
from tests.claiming import claim_one
from tests.portal_support import add_user, login, production
from tests.servers import HttpTestServer, respond
from tests.waiting import wait_until

HOST = socket.gethostname()


def lifecycle(store: SqlStore) -> list[dict[str, Any]]:
    return queries.events(store, queries.EventFilter(lifecycle=True))


def register_peer(store: SqlStore, pid: int, started: int | None) -> None:
    store.register_daemon("peer", host=HOST, pid=pid, production="P", items="",
                          now=utcnow(), pid_namespace=pid_namespace(), process_start=started)


# -- dead means dead ---------------------------------------------------------------------
@pytest.mark.parametrize(("offset", "dead"), [
    # the start time it registered: the daemon itself, alive
    (0, False),
    # another start time at its PID: the PID was recycled by a process started since
    (1, True),
])
def test_a_pid_now_anothers_process_is_a_dead_daemon(
        store: SqlStore, offset: int, dead: bool) -> None:
    started = process_start()
    assert started is not None
    register_peer(store, os.getpid(), started + offset)
    store.enqueue(target="A", body_class=None, body="{}")
    claim_one(store, "A", owner="peer", now=utcnow(), lease_seconds=30)
    forgotten = reap_dead_local_daemons(store, HOST, pid_namespace(),
                                        LifecycleLog(store.events, "finder"))
    assert forgotten == (1 if dead else 0)
    assert ("peer" in [d["id"] for d in queries.daemons(store)]) is not dead
    if dead:
        (event,) = lifecycle(store)
        assert (event["type"], event["job"], event["source_method"]) == (
            "Warning", "finder", "recover")
        assert event["text"] == (f"daemon peer died (pid {os.getpid()} now another "
                                 "process's); 1 message(s) it held are back in their queues")


def test_a_daemon_registered_without_its_start_time_is_judged_by_its_pid_alone() -> None:
    assert why_dead(os.getpid(), None) is None
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: the PID is gone (and not reused within this test)
    assert why_dead(child.pid, None) == f"pid {child.pid} gone"


def test_a_zombie_is_dead_though_a_signal_reaches_it() -> None:
    child = subprocess.Popen(["sleep", "60"])
    started = process_start(child.pid)
    try:
        assert why_dead(child.pid, started) is None
        child.kill()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, still unreaped
        os.kill(child.pid, 0)  # what the check at start used to trust
        assert why_dead(child.pid, started) == f"pid {child.pid} a zombie"
    finally:
        child.kill()
        child.wait()


def test_two_daemons_that_find_one_dead_record_it_once(store: SqlStore) -> None:
    register_peer(store, 2**22 + 12345, None)  # above pid_max: no such process
    assert forget_daemon(store, "peer", "died", LifecycleLog(store.events, "a"))
    assert not forget_daemon(store, "peer", "died", LifecycleLog(store.events, "b"))
    assert [e["job"] for e in lifecycle(store)] == ["a"]


# -- the production's life ---------------------------------------------------------------
def test_a_daemons_start_restart_and_stop_and_an_operators_enable_are_its_life(
        store: SqlStore, database_url: str) -> None:
    with HttpTestServer({"/x": respond(200, "ok")}) as server:
        production = parse_production(
            f'[production]\nname = "P"\ndatabase = "{database_url}"\npoll_interval = 0.05\n'
            f'[[items]]\nname = "A"\nclass = "operations.http:HttpOperation"\n'
            f'[items.settings]\nurl = "{server.url}/x"\n', env={})
        daemon = Daemon(production, store=store, env={})
        daemon.start()
        try:
            daemon.request_restart("A")  # what an operator's restart announces
            wait_until(lambda: [e for e in lifecycle(store) if e["source_method"] == "restart"],
                       30, "item A's restart")
            disable_item(store, "A", known_items=["A"], now=utcnow(), reason="maintenance")
            enable_item(store, "A", known_items=["A"], now=utcnow())
            store.events.write("Info", "not the production's life", config_name="A",
                               source_class="Test", source_method="on_message")
        finally:
            assert daemon.stop()
    rows = [(e["type"], e["source_method"], e["config_name"], e["job"])
            for e in lifecycle(store)]
    me = daemon.id
    leader, started = ("Info", "lead", None, me), ("Info", "start", None, me)
    assert rows.index(leader) < rows.index(started)  # the leader lease, as the start ends
    assert [r for r in rows if r[1] == "lead"] == [leader]  # not A's FIFO lease: the log's
    assert [r for r in rows if r[1] != "lead"] == [
        ("Info", "start", None, me), ("Info", "restart", "A", me),
        ("Info", "disable", "A", None), ("Info", "enable", "A", None),
        ("Info", "stop", None, me)]
    stop = lifecycle(store)[-1]["text"]
    assert stop == f"production P stopped: daemon {me}, stopped by its caller"


def test_a_schema_upgrade_is_an_event_and_creating_the_tables_is_none(
        database_url: str) -> None:
    store = SqlStore(database_url)
    try:
        migrate.upgrade(store.engine, "0016")
        assert lifecycle(store) == []
        assert migrate.upgrade(store.engine) == "0016"
        (event,) = lifecycle(store)
        assert (event["type"], event["source_method"], event["text"]) == (
            "Info", "upgrade", f"database schema upgraded from revision 0016 to {HEAD}")
        migrate.upgrade(store.engine)  # at head already: nothing to record
        assert len(lifecycle(store)) == 1
    finally:
        store.dispose()


# -- the portal --------------------------------------------------------------------------
def test_the_portal_filters_the_life_and_judges_a_daemon_of_this_host_by_its_process(
        store: SqlStore) -> None:
    LifecycleLog(store.events, "d1").write("Info", LifeStep.START, "production P started")
    store.events.write("Error", "a message failed", config_name="Echo",
                       source_class="Echo", source_method="on_first_failure")
    now = store.db_now()
    store.register_daemon("live", host=HOST, pid=os.getpid(), production="P", items="",
                          now=now - timedelta(hours=1), pid_namespace=pid_namespace(),
                          process_start=process_start())
    store.heartbeat("live", now=now, lease_seconds=30)
    child = subprocess.Popen(["true"])
    child.wait()  # gone, yet its heartbeat is fresh
    store.register_daemon("dead", host=HOST, pid=child.pid, production="P", items="",
                          now=now, pid_namespace=pid_namespace())
    add_user(store, "vera", "viewer")
    with TestClient(create_app(store, production(store.url), secret="s", env={})) as client:
        login(client, "vera")
        life = client.get("/events?lifecycle=1").text
        everything = client.get("/events").text
        front = client.get("/").text
    assert "production P started" in life and "a message failed" not in life
    assert 'name="lifecycle" value="1" checked' in life
    assert "a message failed" in everything
    assert 'href="/events?lifecycle=1"' in front
    live = front[front.index('data-daemon="live"'):].split("</tr>")[0]
    dead = front[front.index('data-daemon="dead"'):].split("</tr>")[0]
    assert f"{(now - timedelta(hours=1)):%Y-%m-%d %H:%M}" in live  # when it started
    assert '<td class="yes">yes</td>' in live and '<td class="no">no</td>' in dead


def test_a_start_that_fails_is_an_error_of_the_production_naming_the_item(
        store: SqlStore, database_url: str) -> None:
    production = parse_production(
        f'[production]\nname = "P"\ndatabase = "{database_url}"\n[[items]]\nname = "Ledger"\n'
        f'class = "tests.unit.sample_ops:BrokenInitOperation"\n', env={})
    daemon = Daemon(production, store=store, env={})
    with pytest.raises(EncoreError, match="the ledger file is locked"):
        daemon.start()
    (event,) = lifecycle(store)
    assert (event["type"], event["source_method"], event["config_name"], event["job"]) == (
        "Error", "start", "Ledger", daemon.id)
    assert event["text"].startswith(f"daemon {daemon.id} could not start production P: ")
    assert queries.daemons(store) == []  # nothing registered
