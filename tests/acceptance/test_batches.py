"""Batch claims and group commits under crashes and operator switches (docs/architecture.md,
"Throughput"): a daemon killed while it holds a claimed batch, FIFO order across batches,
and a disable that holds at once."""
from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from engine.clock import utcnow
from engine.config.production import parse_production
from engine.delivery import dispatch
from engine.runtime.daemon import Daemon
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.acceptance.test_crash_and_isolation import done, http_item, production, statuses
from tests.servers import HttpTestServer, Route, respond, sequence
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

HELD = 30.0  # seconds the server holds the request in flight at the kill (never reached)
FAST = 5  # requests answered at once before that one


def post(body: str) -> dict[str, str]:
    return {"method": "POST", "path": "/pay", "body": body}


def send_all(tmp_path: Path, target: str, count: int) -> list[int]:
    lines = "\n".join(json.dumps(post(f"m{i:03d}")) for i in range(count))
    (tmp_path / "bodies.jsonl").write_text(lines + "\n")
    encore("send", target, "--many", "bodies.jsonl", cwd=tmp_path)
    store = SqlStore(f"sqlite:///{tmp_path / 'e.db'}")
    try:
        return sorted(int(r["id"]) for r in _requests(store, target))
    finally:
        store.dispose()


def _requests(store: SqlStore, target: str) -> list[dict[str, object]]:
    from engine.store import queries
    return [r for r in queries.messages(store, item=target) if r["kind"] == "request"]


def received(server: HttpTestServer) -> list[str]:
    return [r.body.decode() for r in list(server.requests)]


def unknown(store: SqlStore, mid: int) -> bool:
    return any((a.error_text or "").startswith("outcome unknown") for a in store.attempts(mid))


def kill_while_a_batch_is_held(tmp_path: Path, *, idempotent: bool
                               ) -> tuple[SqlStore, HttpTestServer, list[int], int]:
    """Queue 30 messages, answer FAST requests at once and hold the next one; kill the daemon
    while it holds it. Returns the store, the server, the ids and how many messages were left
    with an attempt open (in flight, or begun with the batch claim and not yet sent)."""
    route = sequence(*[respond(200, "ok")] * FAST, respond(200, "late", delay=HELD),
                     respond(200, "ok"))
    server = HttpTestServer({"/pay": route}).__enter__()
    store = production(tmp_path, http_item("Pay", server.url, response_timeout=HELD + 10,
                                           idempotent=idempotent, retry_interval=0.2,
                                           failure_timeout=120))
    ids = send_all(tmp_path, "Pay", 30)
    with RunningDaemon(tmp_path) as daemon:
        wait_until(lambda: len(server.requests) > FAST, 20, "the held request to arrive")
        daemon.kill()
    open_now = sum(store.open_attempt(mid) is not None for mid in ids)
    return store, server, ids, open_now


def test_a_batch_claimed_by_a_killed_daemon_is_resent_for_an_idempotent_item(
        tmp_path: Path) -> None:
    store, server, ids, open_at_kill = kill_while_a_batch_is_held(tmp_path, idempotent=True)
    try:
        assert open_at_kill >= 2  # the request in flight and attempts begun with the batch
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: done(store, ids), 60, "every message to settle")
            assert daemon.terminate() == 0
        assert statuses(store, ids) == ["Completed"] * len(ids)
        seen = received(server)
        assert sorted(set(seen)) == [f"m{i:03d}" for i in range(30)]  # none lost
        twice = {b for b in seen if seen.count(b) > 1}
        assert twice == {f"m{FAST:03d}"}  # only the request in flight went out twice
        assert sum(unknown(store, mid) for mid in ids) == open_at_kill
    finally:
        server.__exit__(None, None, None)
        store.dispose()


def test_a_killed_non_idempotent_item_leaves_at_most_one_outcome_unknown_per_worker(
        tmp_path: Path) -> None:
    store, server, ids, open_at_kill = kill_while_a_batch_is_held(tmp_path, idempotent=False)
    try:
        assert open_at_kill == 1  # attempts begin one by one, durably, before each request
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: done(store, ids), 60, "every message to settle")
            assert daemon.terminate() == 0
        final = statuses(store, ids)
        assert final.count("Suspended") == 1 and final.count("Completed") == len(ids) - 1
        assert final[FAST] == "Suspended"  # the one in flight: it may have been processed
        seen = received(server)
        assert sorted(seen) == [f"m{i:03d}" for i in range(30)]  # each sent exactly once
    finally:
        server.__exit__(None, None, None)
        store.dispose()


def test_a_fifo_item_keeps_its_order_across_batches_and_retries(tmp_path: Path) -> None:
    # the 8th request fails twice: the messages claimed behind it wait for it
    route = sequence(*[respond(200, "ok")] * 7, respond(503), respond(503), respond(200, "ok"))
    with HttpTestServer({"/pay": route}) as server:
        store = production(tmp_path, http_item("Fifo", server.url, retry_interval=0.2,
                                               failure_timeout=10))
        ids = send_all(tmp_path, "Fifo", 60)
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: done(store, ids), 30, "every message to complete")
            assert daemon.terminate() == 0
        seen = received(server)
    assert statuses(store, ids) == ["Completed"] * 60
    assert list(dict.fromkeys(seen)) == [f"m{i:03d}" for i in range(60)]  # first arrivals
    assert seen[7:10] == ["m007"] * 3


def started_with_queue(store: SqlStore, url: str, server_url: str, count: int, *,
                       pool_size: int = 1) -> tuple[Daemon, list[int]]:
    """``count`` messages queued for an HTTP item "Pay", then a daemon started in this
    process (stop it)."""
    production = parse_production(
        f'[production]\nname = "T"\ndatabase = "{url}"\npoll_interval = 0.05\n'
        + http_item("Pay", server_url, pool_size=pool_size), env={})
    ids = store.enqueue_many(target="Pay", bodies=[
        ("operations.http:HttpRequest", json.dumps(post(f"m{i:03d}"))) for i in range(count)])
    daemon = Daemon(production, store=store, env={})
    daemon.start()
    return daemon, ids


def disabling(store: SqlStore, at: int) -> Route:
    """Answers at once; while handling request ``at`` an operator disables the item (the
    worker is then in the middle of that attempt, with the rest of its batch claimed)."""
    count = itertools.count(1)

    def route(handler: Any, record: Any) -> None:
        if next(count) == at:
            store.set_item_enabled("Pay", False, reason="test", now=utcnow())
        respond(200, "ok")(handler, record)
    return route


@pytest.mark.parametrize("pool_size", [1, 4])
def test_a_disable_holds_at_once_even_with_messages_already_claimed(
        tmp_path: Path, pool_size: int) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    store = SqlStore(url)
    store.upgrade()
    with HttpTestServer({"/pay": disabling(store, at=40)}) as server:
        daemon, ids = started_with_queue(store, url, server.url, 300, pool_size=pool_size)
        try:
            wait_until(lambda: len(server.requests) >= 40, 20, "the disable")
            wait_until(lambda: "Delivered" not in statuses(store, ids), 10,
                       "the claimed messages to go back to the queue")
            sent = len(server.requests)
        finally:
            daemon.stop()
            store.dispose()
    # only the attempts in flight at the disable went out: none of the claimed batch
    assert 40 <= sent <= 40 + pool_size - 1


def test_messages_claimed_and_not_sent_at_a_stop_go_back_without_an_open_attempt(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    store = SqlStore(url)
    store.upgrade()
    with HttpTestServer({"/pay": respond(200, "ok", delay=0.3)}) as server:
        daemon, ids = started_with_queue(store, url, server.url, 20)
        try:
            wait_until(lambda: len(server.requests) >= 1, 20, "the first request")
        finally:
            daemon.stop()
        sent = len(server.requests)
    unsent = [mid for mid in ids if store.get_message(mid).status == "Queued"]
    assert unsent and sent + len(unsent) == len(ids)
    for mid in unsent:  # no attempt left open to be taken for an outcome unknown
        row = store.get_message(mid)
        assert store.attempts(mid) == [] and row.attempts == 0 and row.first_attempt_at is None
    store.dispose()


def test_a_slow_answer_gives_the_rest_of_its_chunk_to_the_other_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27: a fast item's workers take its claim in chunks of about CHUNK_WORK of work
    (one hand-off, not one per message); after an answer slower than CHUNK_GIVE_BACK the
    chunk's worker gives the rest back, so the pool's other workers share them instead of
    one worker sending them one after the other. CHUNK_WORK is raised so that the first
    claim (all four messages) is certainly one chunk."""
    monkeypatch.setattr(dispatch, "CHUNK_WORK", 60.0)
    in_flight = {"now": 0, "most": 0}
    lock = threading.Lock()
    slow_reply = respond(200, "slow", delay=1.0)

    def counted(handler: Any, record: Any) -> None:
        with lock:
            in_flight["now"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["now"])
        try:
            slow_reply(handler, record)
        finally:
            with lock:
                in_flight["now"] -= 1

    url = f"sqlite:///{tmp_path / 'e.db'}"
    store = SqlStore(url)
    store.upgrade()
    with HttpTestServer({"/pay": counted}) as server:
        daemon, ids = started_with_queue(store, url, server.url, 4, pool_size=2)
        try:
            wait_until(lambda: done(store, ids), 60, "the messages to complete")
        finally:
            daemon.stop()
    assert statuses(store, ids) == ["Completed"] * 4
    assert in_flight["most"] == 2  # both workers had a slow request in flight at once
    store.dispose()
