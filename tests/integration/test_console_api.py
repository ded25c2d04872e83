"""The operator's console through the API and the pages (Starlette's TestClient) against a real
daemon in this process, on SQLite and PostgreSQL (what is only the console's, on SQLite):
the per-minute rollup the daemon writes, ``GET /api/v1/items/{name}``'s shape and setting
sources, restart (``on_init`` again, on the daemon that heard the announcement), the Testing
Service, the queue pages, the daemon's report of what runs (``daemon.items`` rewritten by a
reload, a refused reload) and the portal following the file. Real time: order and generous
bounds only."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from engine import BusinessOperation
from engine.config.production import load_production
from engine.portal import create_app
from engine.runtime.daemon import Daemon
from engine.store import rollup, running
from engine.store.models import daemon as daemon_table
from engine.store.models import event_log
from engine.store.sql import SqlStore
from tests.portal_support import add_token, add_user, bearer, csrf_of, login
from tests.waiting import wait_until

PATIENCE = 30.0  # seconds a test waits at most for what should take one or two
PRODUCTION = """
[production]
name = "ConsoleTest"
database = "{url}"
lease_seconds = 3

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"
[items.settings]
RetryInterval = 1
failure_timeout = 40

[[items]]
name = "Counted"
class = "tests.integration.test_console_api:CountedOperation"

[[items]]
name = "Web"
class = "operations.http:HttpOperation"
[items.settings]
servers = ["http://clerk:sekret-in-url@127.0.0.1:9", "http://127.0.0.1:10"]
credentials = "payments"
"""
ENV = {"ENCORE_CREDENTIALS_PAYMENTS_USERNAME": "shop",
       "ENCORE_CREDENTIALS_PAYMENTS_PASSWORD": "sekret-in-env"}
EXTRA = """
[[items]]
name = "Added"
class = "tests.unit.sample_ops:EchoOperation"
"""
BROKEN = """
[[items]]
name = "Broken"
class = "tests.unit.sample_ops:BrokenInitOperation"
"""


class CountedOperation(BusinessOperation):
    """Counts its ``on_init`` and ``on_tear_down`` calls."""

    inits = 0
    tear_downs = 0
    lock = threading.Lock()

    def on_init(self) -> None:
        with CountedOperation.lock:
            CountedOperation.inits += 1

    def on_tear_down(self) -> None:
        with CountedOperation.lock:
            CountedOperation.tear_downs += 1

    def on_message(self, request: Any) -> Any:
        return {"seen": request.to_dict()}


class Setup:
    def __init__(self, path: Path, store: SqlStore, daemon: Daemon, client: TestClient,
                 tokens: dict[str, dict[str, str]]) -> None:
        self.path, self.store, self.daemon, self.client, self.tokens = \
            path, store, daemon, client, tokens


@pytest.fixture
def setup(tmp_path: Path, store: SqlStore) -> Iterator[Setup]:
    path = tmp_path / "production.toml"
    path.write_text(PRODUCTION.format(url=store.url))
    production = load_production(path, ENV)
    for name, role in (("olga", "operator"), ("vera", "viewer"), ("adam", "admin")):
        add_user(store, name, role)
    tokens = {role: bearer(add_token(store, role)) for role in
              ("sender", "viewer", "operator", "admin")}
    CountedOperation.inits = CountedOperation.tear_downs = 0
    daemon = Daemon(production, store=store, env=ENV)  # one store, as [portal] in encore run
    daemon.start()
    app = create_app(store, production, secret="test-secret", env=ENV)
    try:
        with TestClient(app) as client:
            yield Setup(path, store, daemon, client, tokens)
    finally:
        app.state.follower.stop()
        daemon.stop()


def info_events(store: SqlStore, method: str) -> list[str]:
    """The Info events of the users' actions ``method`` (a daemon's record of what it did
    carries its id in ``job``)."""
    with store.engine.connect() as conn:
        return list(conn.execute(select(event_log.c.text).where(
            event_log.c.type == "Info", event_log.c.source_method == method,
            event_log.c.job.is_(None)).order_by(event_log.c.id)).scalars())


def send(s: Setup, target: str, body: dict[str, Any]) -> int:
    answer = s.client.post(f"/api/v1/messages/{target}?wait=20", json=body,
                           headers=s.tokens["sender"])
    assert answer.status_code == 200, answer.text
    return int(answer.json()["id"])


@pytest.mark.dialect_free
def test_the_item_api_gives_settings_with_sources_and_counters_from_the_rollup(
        setup: Setup) -> None:
    for n in range(3):
        send(setup, "Echo", {"text": f"m{n}"})
    setup.daemon.flush_rollup()
    item = setup.client.get("/api/v1/items/Echo", headers=setup.tokens["viewer"]).json()
    assert {"name", "class", "enabled", "settings", "daemons", "state", "counters",
            "latency_ms"} <= set(item)
    assert item["name"] == "Echo" and item["enabled"] is True and item["state"] == "green"
    assert item["settings"]["retry_interval"] == {"value": 1.0, "source": "alias"}
    assert item["settings"]["failure_timeout"] == {"value": 40.0, "source": "file"}
    assert item["settings"]["backoff"] == {"value": "fixed", "source": "class default"}
    assert [d["daemon"] for d in item["daemons"]] == [setup.daemon.id]
    hour = item["counters"]["1h"]
    assert hour["attempts"] == hour["completed"] == hour["attempts_by_outcome"]["ok"] == 3
    assert hour["errors"] == hour["retries"] == hour["give_ups"] == 0
    assert item["counters"]["24h"]["completed"] == 3
    assert item["latency_ms"]["p50"] is not None and \
        item["latency_ms"]["p50"] <= item["latency_ms"]["p95"]
    assert sum(m["messages"] for m in item["per_minute"]) == 3
    # the page draws the same counts, and the charts as inline SVG
    login(setup.client, "vera")
    page = setup.client.get("/items/Echo").text
    assert 'data-counter="completed">3<' in page and page.count("<svg class=\"chart\"") == 2
    assert "Restart" not in page and 'class="test"' not in page  # a viewer: no action


class StillClock:
    """A clock that moves only when told to (``now`` and ``monotonic`` together)."""

    def __init__(self, start: Any) -> None:
        self.start, self.elapsed = start, 0.0

    def now(self) -> Any:
        return self.start + timedelta(seconds=self.elapsed)

    def monotonic(self) -> float:
        return self.elapsed


def test_a_flush_replaces_the_daemons_row_of_the_minute_and_rows_add_up_across_daemons(
        store: SqlStore) -> None:
    clock = StillClock(rollup.minute_of(store.db_now()) - timedelta(minutes=5))
    counter = rollup.RollupCounter(clock)
    counter.attempt("X", "ok", 0.004, 1)
    counter.completed("X")
    assert rollup.flush(store, counter, "d1") == 1
    counter.attempt("X", "timeout", 2.5, 2)
    counter.gave_up("X")
    assert rollup.flush(store, counter, "d1") == 1  # the same row, replaced by the totals
    other = rollup.RollupCounter(clock)
    other.attempt("X", "ok", 0.1, 1)
    rollup.flush(store, other, "d2")
    assert rollup.flush(store, counter, "d1") == 0  # nothing changed: nothing written
    clock.elapsed = 61.0  # the next minute: a row of its own
    counter.attempt("X", "ok", 0.001, 1)
    counter.attempt("Y", "fault", 0.001, 1)
    assert rollup.flush(store, counter, "d1") == 2
    counts = rollup.item_rollup(store, "X", now=clock.now())
    hour = counts.counters(counts.hour)
    assert hour["attempts_by_outcome"]["ok"] == 3 and hour["attempts_by_outcome"]["timeout"] == 1
    assert (hour["completed"], hour["give_ups"], hour["retries"], hour["errors"]) == (1, 1, 1, 1)
    assert hour["latency_ms"] == {"p50": 5.0, "p95": 5000.0}
    assert [m.attempts for _, m in counts.per_minute if m.attempts] == [3, 1]
    assert counter.last_outcome == {"X": "ok", "Y": "fault"}


def test_a_restart_tears_down_and_runs_on_init_again_with_one_info_event(
        setup: Setup) -> None:
    assert CountedOperation.inits == 1
    answer = setup.client.post("/api/v1/items/Counted/restart", headers=setup.tokens["operator"])
    assert answer.status_code == 202 and answer.json()["restarting_on"] == [setup.daemon.id]
    wait_until(lambda: CountedOperation.inits == 2, PATIENCE, "on_init ran again")
    time.sleep(1.0)  # heard twice on PostgreSQL (callback and NOTIFY): restarted once
    assert (CountedOperation.inits, CountedOperation.tear_downs) == (2, 1)
    assert send(setup, "Counted", {"after": "restart"})  # the new runner delivers
    events = info_events(setup.store, "restart")
    assert len(events) == 1 and "operator-bot" in events[0]
    refused = setup.client.post("/api/v1/items/Counted/restart", headers=setup.tokens["viewer"])
    assert refused.status_code == 403


@pytest.mark.dialect_free
def test_the_testing_service_answers_the_response_and_refuses_a_bad_body(
        setup: Setup) -> None:
    answer = setup.client.post("/api/v1/items/Echo/test", content=json.dumps({"text": "hi"}),
                               headers=setup.tokens["operator"])
    assert answer.status_code == 200
    result = answer.json()
    assert result["status"] == "Completed" and result["error"] is None
    assert result["response"] == {"text": "HI", "count": 1}
    row = setup.store.get_message(result["id"])
    assert row is not None and row.source == "test:operator-bot"
    bad = setup.client.post("/api/v1/items/Echo/test", content='{"nope": 1}',
                            headers=setup.tokens["operator"])
    assert bad.status_code == 400 and "error" in bad.json()
    assert len(info_events(setup.store, "test")) == 1  # only the one that was sent
    # the form: CSRF checked, confirmation asked, the result shown
    login(setup.client, "olga")
    token = csrf_of(setup.client)
    forged = setup.client.post("/items/Echo/test", data={"body": '{"text": "x"}',
                                                         "confirmed": "yes"})
    assert forged.status_code == 403
    asked = setup.client.post("/items/Echo/test", data={"body": '{"text": "x"}',
                                                        "csrf_token": token})
    assert "Send this test message to Echo?" in asked.text
    shown = setup.client.post("/items/Echo/test", data={
        "body": '{"text": "form"}', "csrf_token": token, "confirmed": "yes"})
    assert 'id="test-status">Completed<' in shown.text and "FORM" in shown.text
    assert len(info_events(setup.store, "test")) == 2


@pytest.mark.dialect_free
def test_the_queue_page_lists_queued_messages_in_order_and_suspends_with_one_event(
        setup: Setup) -> None:
    setup.client.post("/api/v1/items/Echo/disable", headers=setup.tokens["operator"])
    ids = [setup.client.post("/api/v1/messages/Echo", json={"text": f"q{n}"},
                             headers=setup.tokens["sender"]).json()["id"] for n in range(4)]
    login(setup.client, "olga")
    overview = setup.client.get("/queues").text
    assert 'data-queue="Echo"' in overview
    page = setup.client.get("/queues/Echo").text
    assert [int(i) for i in _queued_ids(page)] == ids
    token = csrf_of(setup.client)
    done = setup.client.post(f"/queues/Echo/{ids[1]}/suspend",
                             data={"csrf_token": token, "confirmed": "yes"},
                             follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/queues/Echo"
    assert [int(i) for i in _queued_ids(setup.client.get("/queues/Echo").text)] == \
        [ids[0], *ids[2:]]
    events = info_events(setup.store, "suspend")
    assert events == ["suspended by user 'olga' (operator) through the portal"]
    enable = info_events(setup.store, "disable")
    assert len(enable) == 1 and "operator-bot" in enable[0]


def _queued_ids(html: str) -> list[str]:
    import re

    return re.findall(r'data-queued="(\d+)"', html)


def test_a_reload_rewrites_daemon_items_and_the_portal_follows_the_announcement(
        setup: Setup) -> None:
    def reported() -> tuple[str, dict[str, Any]]:
        with setup.store.engine.connect() as conn:
            items, states = conn.execute(
                select(daemon_table.c["items"], daemon_table.c.item_states)
                .where(daemon_table.c.id == setup.daemon.id)).one()
        return items, running.read_states(states)[0]

    assert reported()[0] == "Echo,Counted,Web"
    assert setup.client.post("/api/v1/messages/Added", json={"text": "x"},
                             headers=setup.tokens["sender"]).status_code == 404
    original = setup.path.read_text()
    setup.path.write_text(original + EXTRA)
    status = setup.client.get("/api/v1/status", headers=setup.tokens["viewer"]).json()
    assert status["file_changed"] is True
    login(setup.client, "adam")
    front = setup.client.get("/").text
    assert "changed since the daemons loaded it" in front and 'action="/production/reload"' in front
    setup.client.cookies.clear()
    login(setup.client, "olga")
    front = setup.client.get("/").text
    assert "changed since the daemons loaded it" in front and "/production/reload" not in front
    token = csrf_of(setup.client)
    refused = setup.client.post("/production/reload", data={"csrf_token": token,
                                                            "confirmed": "yes"})
    assert refused.status_code == 403  # an operator is not an admin
    # an admin's Reload, as SIGHUP: the daemon hears it, reloads, announces it; the portal
    # (not following the file by itself here) loads the file when it hears that
    assert setup.client.post("/api/v1/production/reload",
                             headers=setup.tokens["operator"]).status_code == 403
    assert setup.client.post("/api/v1/production/reload",
                             headers=setup.tokens["admin"]).status_code == 202
    wait_until(lambda: reported()[0] == "Echo,Counted,Web,Added", PATIENCE,
               "daemon.items rewritten")
    wait_until(lambda: setup.client.post("/api/v1/messages/Added", json={"text": "x"},
                                         headers=setup.tokens["sender"]).status_code == 202,
               PATIENCE, "the portal takes intake for the added item")
    status = setup.client.get("/api/v1/status", headers=setup.tokens["viewer"]).json()
    assert status["file_changed"] is False
    added = next(i for i in status["items"] if i["name"] == "Added")
    assert added["running"]["daemons"] == [{"daemon": setup.daemon.id, "state": "ready"}]
    (asked,) = info_events(setup.store, "reload")  # the admin's
    assert asked.startswith("reload of the production file asked of every daemon")
    with setup.store.engine.connect() as conn:  # and the daemon's, of the production's life
        (applied,) = conn.execute(select(event_log.c.text).where(
            event_log.c.type == "Info", event_log.c.source_method == "reload",
            event_log.c.job == setup.daemon.id)).scalars()
    assert applied.startswith("production reloaded from") and "started Added" in applied
    # a reload that cannot start an item is refused: the item shows as refused, red
    setup.path.write_text(original + EXTRA + BROKEN)
    setup.daemon.reload()
    assert reported()[1]["Broken"]["state"] == "refused"
    status = setup.client.get("/api/v1/status", headers=setup.tokens["viewer"]).json()
    assert status["file_changed"] is True and status["reload_refused"]
    assert [i for i in status["items"] if i["name"] == "Broken"] == []  # the portal too
    setup.client.app.state.follower.reload(force=True)  # as a standalone portal would
    broken = setup.client.get("/api/v1/items/Broken", headers=setup.tokens["viewer"]).json()
    assert broken["state"] == "red" and "refused" in broken["why"]
    assert broken["refused"] and "on_init" in broken["refused"]


@pytest.mark.dialect_free
def test_secrets_are_shown_only_by_their_credential_name(setup: Setup) -> None:
    answer = setup.client.get("/api/v1/items/Web", headers=setup.tokens["viewer"])
    text = answer.text
    assert "sekret" not in text and "clerk" not in text
    item = answer.json()
    assert item["settings"]["credentials"] == {"value": "payments", "source": "file"}
    assert item["target"]["credentials"] == "payments"
    assert [s["url"] for s in item["target"]["servers"]] == \
        ["http://127.0.0.1:9", "http://127.0.0.1:10"]
    assert [s["bad"] for s in item["target"]["servers"]] == [False, False]
    login(setup.client, "vera")
    page = setup.client.get("/items/Web").text
    assert "sekret" not in page and "payments" in page


@pytest.mark.dialect_free
def test_a_failing_item_turns_red_counts_as_retrying_and_marks_its_server_bad(
        setup: Setup) -> None:
    accepted = setup.client.post("/api/v1/messages/Web", json={"method": "GET", "path": "/"},
                                 headers=setup.tokens["sender"])
    assert accepted.status_code == 202

    def web() -> dict[str, Any] | None:
        status = setup.client.get("/api/v1/status", headers=setup.tokens["viewer"]).json()
        item = next(i for i in status["items"] if i["name"] == "Web")
        return item if item["light"] == "red" and item["retrying"] == 1 else None

    item = wait_until(web, PATIENCE, "Web red and retrying")
    assert item["why"] == "last attempt failed"
    page = setup.client.get("/api/v1/items/Web", headers=setup.tokens["viewer"]).json()
    assert page["queue"]["retrying"] == 1
    marks = wait_until(lambda: [s["bad"] for s in setup.client.get(
        "/api/v1/items/Web", headers=setup.tokens["viewer"]).json()["target"]["servers"]
        if s["bad"]], PATIENCE, "a server marked bad")
    assert marks == [True] or marks == [True, True]
