"""Isolation, ordering, graceful stop and crash safety of ``encore run`` (docs/architecture.md),
with real daemon processes against real loopback HTTP servers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.servers import HttpTestServer, respond, sequence
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

FINAL = ("Completed", "Error", "Suspended")


def production(tmp_path: Path, items: str, **prod: object) -> SqlStore:
    """Write production.toml (SQLite in tmp_path), upgrade it, return its store."""
    url = f"sqlite:///{tmp_path / 'e.db'}"
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in prod.items())
    (tmp_path / "production.toml").write_text(
        f'[production]\nname = "T"\ndatabase = "{url}"\npoll_interval = 0.05\n'
        f"lease_seconds = 3\n{extra}{items}")
    encore("db", "upgrade", cwd=tmp_path)
    return SqlStore(url)


def http_item(name: str, url: str, *, pool_size: int = 1, **settings: object) -> str:
    body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    return (f'\n[[items]]\nname = "{name}"\nclass = "operations.http:HttpOperation"\n'
            f"pool_size = {pool_size}\n[items.settings]\nurl = \"{url}\"\n{body}")


def send(tmp_path: Path, target: str, path: str) -> int:
    body = json.dumps({"method": "GET", "path": path})
    return int(encore("send", target, "--body", body, cwd=tmp_path).stdout)


def statuses(store: SqlStore, ids: list[int]) -> list[str]:
    return [store.get_message(i).status for i in ids]


def done(store: SqlStore, ids: list[int]) -> bool:
    return all(s in FINAL for s in statuses(store, ids))


def test_slow_calls_never_time_out_fast_ones_seed_004(tmp_path: Path) -> None:
    # generous times: a fast call must finish well inside the timeout on a loaded machine
    routes = {"/slow": respond(200, "slow", delay=3.0), "/fast": respond(200, "fast", delay=0.05)}
    with HttpTestServer(routes) as server:
        store = production(tmp_path,
                           http_item("Calls", server.url, pool_size=2, response_timeout=1.5,
                                     failure_timeout=0)
                           + http_item("Other", server.url, response_timeout=1.5,
                                       failure_timeout=0))
        ids = [send(tmp_path, "Calls", p) for p in ("/fast", "/slow", "/slow", "/fast", "/fast")]
        others = [send(tmp_path, "Other", "/fast") for _ in range(3)]
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: done(store, ids + others), 30, "all calls to finish")
            assert daemon.terminate() == 0
    assert statuses(store, ids) == ["Completed", "Error", "Error", "Completed", "Completed"]
    assert statuses(store, others) == ["Completed"] * 3
    slow_end = min(store.get_message(i).time_completed for i in ids[1:3])
    assert all(store.get_message(i).time_completed < slow_end for i in others)
    for mid in ids[3:]:  # queued behind the slow calls, yet their own attempt was fast
        (attempt,) = store.attempts(mid)
        assert (attempt.ended_at - attempt.started_at).total_seconds() < 1.5


@pytest.mark.parametrize(("mode", "expected_order"), [
    # blocking: the retrying message holds back the one behind it (Ensemble FIFO)
    ("blocking", ["flaky", "flaky", "flaky", "ok"]),
    # requeue: the parked message lets the next one through
    ("requeue", ["flaky", "ok", "flaky", "flaky"]),
])
def test_blocking_retries_keep_fifo_order_and_requeue_serves_others(
        tmp_path: Path, mode: str, expected_order: list[str]) -> None:
    routes = {"/flaky": sequence(respond(503), respond(503), respond(200, "at last")),
              "/ok": respond(200, "ok")}
    with HttpTestServer(routes) as server:
        store = production(tmp_path, http_item("Fifo", server.url, retry_interval=0.5,
                                               failure_timeout=10, retry_mode=mode))
        ids = [send(tmp_path, "Fifo", "/flaky"), send(tmp_path, "Fifo", "/ok")]
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: done(store, ids), 30, "both messages to finish")
            assert daemon.terminate() == 0
        order = [r.path.strip("/") for r in server.requests]
    assert statuses(store, ids) == ["Completed", "Completed"]
    assert order == expected_order


def test_a_kill_during_a_retry_wait_resumes_with_the_original_failure_timeout(
        tmp_path: Path) -> None:
    with HttpTestServer({"/down": respond(503)}) as server:
        store = production(tmp_path, http_item("Retry", server.url, retry_interval=1.5,
                                               failure_timeout=4))
        (mid,) = [send(tmp_path, "Retry", "/down")]
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: store.get_message(mid).attempts >= 2, 20, "a second attempt")
            daemon.kill()
        first = store.get_message(mid).first_attempt_at
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: done(store, [mid]), 30, "the give-up")
            assert daemon.terminate() == 0
    row = store.get_message(mid)
    attempts = store.attempts(mid)
    assert row.status == "Error" and row.first_attempt_at == first
    assert [a.attempt for a in attempts] == list(range(1, len(attempts) + 1))
    assert all(a.ended_at is not None for a in attempts)
    assert (attempts[-1].ended_at - first).total_seconds() >= 4  # counted from attempt 1
    assert (attempts[-1].started_at - first).total_seconds() < 4 + 1.5
    errors = queries.events(store, queries.EventFilter(type="Error", message_id=mid))
    assert len(errors) == 2  # the first failure was not written again after the restart
    assert "FailureTimeout of 4 seconds exceeded" in errors[-1]["text"]


@pytest.mark.parametrize(("idempotent", "status", "requests"), [
    # idempotent: the attempt in flight at the crash is sent again
    (True, "Completed", 2),
    # not idempotent: it may have been processed, so an operator decides
    (False, "Suspended", 1),
])
def test_a_kill_during_an_attempt_resends_only_idempotent_items(
        tmp_path: Path, idempotent: bool, status: str, requests: int) -> None:
    route = sequence(respond(200, "first", delay=3.0), respond(200, "second"))
    with HttpTestServer({"/pay": route}) as server:
        store = production(tmp_path, http_item("Pay", server.url, response_timeout=10,
                                               idempotent=idempotent))
        mid = send(tmp_path, "Pay", "/pay")
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: server.requests, 20, "the request to reach the server")
            daemon.kill()
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: done(store, [mid]), 30, "the message to settle")
            assert daemon.terminate() == 0
        assert len(server.requests) == requests
    assert store.get_message(mid).status == status
    first = store.attempts(mid)[0]
    assert first.error_text.startswith("outcome unknown")
    texts = [e["text"] for e in queries.events(store, queries.EventFilter(message_id=mid))]
    if not idempotent:
        assert any("may have been processed" in t for t in texts)


def test_sigterm_lets_the_attempt_in_flight_finish(tmp_path: Path) -> None:
    with HttpTestServer({"/slow": respond(200, "done", delay=1.0)}) as server:
        store = production(tmp_path, http_item("Slow", server.url, response_timeout=5))
        mid = send(tmp_path, "Slow", "/slow")
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: server.requests, 20, "the request to reach the server")
            assert daemon.terminate() == 0
    assert store.get_message(mid).status == "Completed"


def test_an_attempt_cut_short_by_the_shutdown_timeout_counts_as_outcome_unknown(
        tmp_path: Path) -> None:
    with HttpTestServer({"/slow": respond(200, "done", delay=3.0)}) as server:
        store = production(tmp_path, http_item("Slow", server.url, response_timeout=10,
                                               idempotent=False), shutdown_timeout=0.2)
        mid = send(tmp_path, "Slow", "/slow")
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: server.requests, 20, "the request to reach the server")
            assert daemon.terminate() == 0
        row = store.get_message(mid)
        assert row.status == "Queued" and store.open_attempt(mid) is not None
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: done(store, [mid]), 30, "the message to settle")
            assert daemon.terminate() == 0
        assert len(server.requests) == 1
    assert store.get_message(mid).status == "Suspended"
