"""Waiting is an event (docs/architecture.md): a waiter is woken by the commit that ends its
message — in this process, from another process (NOTIFY on PostgreSQL, the doorbell on SQLite) —
never before that commit, never missing one committed between its look and its wait, and the safety
net's poll still returns it when an announcement is lost. On real SQLite files and PostgreSQL.

The safety net's period is set far above the bounds asserted here (``NO_POLL``), so a waiter
that returns in time was woken by the announcement, not by a poll."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from engine.client import accept_message, wait_for, wait_for_response
from engine.clock import utcnow
from engine.config.production import parse_production
from engine.serving.intake import accept_and_wait
from engine.store.hotpath.base import Completion
from engine.store.notify import Announcement
from engine.store.sql import SqlStore
from tests.acceptance.daemon import ROOT
from tests.claiming import claim_one
from tests.waiting import wait_until

NO_POLL = 60.0  # seconds: the safety net's period in these tests (none of them waits so long)
WOKEN_WITHIN = 5.0  # seconds a woken waiter may take here at most (milliseconds in practice)
PRODUCTION = parse_production('[[items]]\nname = "Echo"\nclass = "tests.unit.sample_ops:'
                              'EchoOperation"\n', env={})


def _accept(store: SqlStore) -> int:
    return accept_message(store, PRODUCTION, "Echo", {"text": "hi"}, waited=True).id


def _complete(store: SqlStore, message_id: int) -> None:
    row = claim_one(store, "Echo", owner="other", now=utcnow(), lease_seconds=30)
    assert row is not None and row.id == message_id
    store.complete(row, response_class=None, response_body='{"ok": true}', now=utcnow())


_COMPLETER = """
import sys, time
from datetime import datetime, timezone
from engine.store.sql import SqlStore
store = SqlStore(sys.argv[1])
time.sleep(float(sys.argv[3]))
claimed = store.claim("Echo", owner="child", now=datetime.now(timezone.utc), lease_seconds=30)
assert [c.row.id for c in claimed] == [int(sys.argv[2])], claimed
row = claimed[0].row
print(time.monotonic(), flush=True)  # the commit starts
store.complete(row, response_class=None, response_body='{"ok": true}',
               now=datetime.now(timezone.utc))
store.dispose()
"""


def test_a_waiter_is_woken_by_a_completion_another_process_commits(database_url: str) -> None:
    store = SqlStore(database_url)
    store.upgrade()
    try:
        mid = _accept(store)
        child = subprocess.Popen([sys.executable, "-c", _COMPLETER, database_url, str(mid),
                                  "1.0"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            row = wait_for(store, mid, 30, poll=NO_POLL, marked=True)
            woken = time.monotonic()
            out, _ = child.communicate(timeout=30)
        finally:
            child.kill()
        assert child.returncode == 0
        assert row is not None and row.status == "Completed"
        committing = float(out.split()[-1])  # the child's monotonic time before its commit
        # the same clock on one machine; the wake follows the commit, long before a poll
        assert 0 <= woken - committing < WOKEN_WITHIN
    finally:
        store.dispose()


def test_a_completion_between_the_waiters_look_and_its_wait_is_not_missed(
        database_url: str) -> None:
    store, other = SqlStore(database_url), SqlStore(database_url)  # other: another process
    store.upgrade()
    try:
        mid = _accept(store)
        look = store.get_message

        def look_then_complete(message_id: int):  # type: ignore[no-untyped-def]
            row = look(message_id)
            if row is not None and row.status == "Queued":
                _complete(other, message_id)  # after the look, before the wait
            return row

        store.get_message = look_then_complete  # type: ignore[method-assign]
        started = time.monotonic()
        row = wait_for(store, mid, 30, poll=NO_POLL, marked=True)
        assert row is not None and row.status == "Completed"
        assert time.monotonic() - started < WOKEN_WITHIN
    finally:
        store.dispose()
        other.dispose()


def test_a_fresh_waiter_skips_its_first_look_yet_misses_no_end_before_it_registered(
        database_url: str) -> None:
    """``fresh``: a message accepted ``waited`` after this process was already hearing every
    end is not read before the wait — the hub remembers the ends announced lately. Ended
    here or by another process before the waiter registered, it is returned at once (no
    look, then, would find it only by the safety net)."""
    store, other = SqlStore(database_url), SqlStore(database_url)  # other: another process
    store.upgrade()
    try:
        with store.completions.watching(0, lambda: None):
            pass  # the first watch starts the hearing, for good
        assert store.completions.hearing
        looks = _count_reads(store, "get_message")
        for completer in (store, other):
            mid = _accept(store)
            _complete(completer, mid)  # ends before the waiter registers
            if completer is other:
                wait_until(lambda: store.completions.ended_lately(mid), WOKEN_WITHIN,  # noqa: B023
                           "the other process's end")
            started = time.monotonic()
            row = wait_for(store, mid, 30, poll=NO_POLL, marked=True, fresh=True)
            assert row is not None and row.status == "Completed"
            assert time.monotonic() - started < WOKEN_WITHIN
        looks.clear()
        mid = _accept(store)  # not ended: woken by its end, with no look before the wait
        timer = threading.Timer(0.3, lambda: _complete(other, mid))
        timer.start()
        row = wait_for(store, mid, 30, poll=NO_POLL, marked=True, fresh=True)
        timer.join()
        assert row is not None and row.status == "Completed"
        assert looks == [mid]  # the one look after the wake-up
    finally:
        store.dispose()
        other.dispose()


def test_a_waiter_whose_announcement_is_lost_still_returns_by_its_safety_net(
        database_url: str) -> None:
    store = SqlStore(database_url)
    store.upgrade()
    try:
        mid = _accept(store)
        # the end committed behind the engine's back: nobody announces it
        raw = create_engine(store.url)
        timer = threading.Timer(0.3, lambda: _finish_raw(raw, mid))
        timer.start()
        started = time.monotonic()
        row = wait_for(store, mid, 30, poll=1.0, marked=True)
        timer.join()
        raw.dispose()
        assert row is not None and row.status == "Error"
        assert 0.3 <= time.monotonic() - started < 1.0 + WOKEN_WITHIN
    finally:
        store.dispose()


def _finish_raw(engine, message_id: int) -> None:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        conn.execute(text("UPDATE message_header SET status = 'Error', error_text = 'x' "
                          "WHERE id = :id"), {"id": message_id})


def test_nothing_is_announced_before_its_commit(database_url: str) -> None:
    """Every waiter's wake-up, whatever ended the message, finds its end in the database
    through a connection of another store."""
    store, reader = SqlStore(database_url), SqlStore(database_url)
    store.upgrade()
    seen: list[str] = []
    watches = ExitStack()
    try:
        ids = [_accept(store) for _ in range(4)]
        for mid in ids:
            watches.enter_context(store.completions.watching(
                mid, lambda mid=mid: seen.append(reader.get_message(mid).status)))
        _complete(store, ids[0])  # one at a time
        rows = [claim_one(store, "Echo", owner="d", now=utcnow(), lease_seconds=30)
                for _ in range(2)]
        store.complete_many([_completion(r) for r in rows if r is not None], now=utcnow())
        store.finish(ids[3], status="Error", error_text="gave up", now=utcnow())
        assert sorted(set(seen)) == ["Completed", "Error"] and len(seen) >= 4
    finally:
        watches.close()
        store.dispose()
        reader.dispose()


def _completion(row):  # type: ignore[no-untyped-def]
    from engine.store.hotpath import Completion

    attempt = row.id  # no attempt row: the completion's attempt update matches nothing
    now = utcnow()
    return Completion(row.id, row.claim_token, attempt, now - timedelta(milliseconds=1), now,
                      None, None, '{"ok": true}')


def test_bulk_traffic_that_nobody_waits_for_announces_no_end(database_url: str) -> None:
    store = SqlStore(database_url)
    store.upgrade()
    heard = []
    store.add_queue_callback(heard.append)
    try:
        mid = accept_message(store, PRODUCTION, "Echo", {"text": "bulk"}).id
        _complete(store, mid)
        assert [n.kind.value for n in heard] == ["work"]
        waited = _accept(store)
        _complete(store, waited)
        assert [n.kind.value for n in heard][-1] == "done" and heard[-1].ids == (waited,)
    finally:
        store.dispose()


def test_an_idle_daemon_hears_another_processes_message_at_once(database_url: str) -> None:
    """An item named like an announcement of another kind ("breaker Echo") next to "Echo"
    gets its own wake-ups; the poll interval is far longer than the bound."""
    from engine.runtime.daemon import Daemon

    store = SqlStore(database_url)
    store.upgrade()
    items = "".join(f'[[items]]\nname = "{name}"\nclass = "tests.unit.sample_ops:'
                    f'EchoOperation"\n' for name in ("Echo", "breaker Echo", "switch on Echo"))
    production = parse_production(f"[production]\npoll_interval = {NO_POLL}\n" + items,
                                  env={})
    daemon = Daemon(production, store=SqlStore(database_url), env={})
    daemon.start()
    try:
        time.sleep(0.5)  # the dispatchers' first looks are over: they are idle
        for name in ("breaker Echo", "switch on Echo", "Echo"):
            sent = time.monotonic()
            mid = accept_message(store, production, name, {"text": name}).id
            row = wait_for(store, mid, 30, poll=NO_POLL)
            assert row is not None and row.status == "Completed", name
            assert time.monotonic() - sent < WOKEN_WITHIN, name
    finally:
        daemon.stop()
        daemon.store.dispose()
        store.dispose()


def _claim_and_complete(store: SqlStore, body: str) -> None:
    """Claim the one Echo message and record its success through the hot path, as a
    dispatcher's group commit does."""
    claim = {"owner": "here", "lease_seconds": 30, "limit": 1, "fifo": False, "begin": True,
             "enabled": True}
    _, claimed = store.complete_and_claim([], now=utcnow(), target="Echo", **claim)
    assert len(claimed) == 1 and claimed[0].begun is not None
    row = claimed[0].row
    now = utcnow()
    done = store.complete_many([Completion(
        message_id=row.id, token=row.claim_token, attempt_id=claimed[0].begun, started_at=now,
        ended_at=now, server=None, response_class=None, response_body=body, urgent=True)],
        now=now)
    assert done == [row.id]


def _count_reads(store: SqlStore, method: str = "get_outcome") -> list[int]:
    """The ids the store's ``method`` (a read of one message) is asked for from now on (a
    waiter's reads)."""
    reads: list[int] = []
    read = getattr(store, method)

    def counted(message_id: int):  # type: ignore[no-untyped-def]
        reads.append(message_id)
        return read(message_id)

    setattr(store, method, counted)
    return reads


def test_a_success_committed_here_answers_its_waiter_without_a_read(database_url: str) -> None:
    """The intake's wait (``accept_and_wait``): a success this process commits leaves its
    response with the hub, and the waiter answers with it — no read of the message; one
    committed by another process is read, as before."""
    store, other = SqlStore(database_url), SqlStore(database_url)
    store.upgrade()
    reads = _count_reads(store)

    async def call(completer: SqlStore, body: str) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        timer = loop.call_later(0.3, lambda: threading.Thread(
            target=_claim_and_complete, args=(completer, body)).start())
        try:
            _, outcome = await accept_and_wait(
                store, lambda: accept_message(store, PRODUCTION, "Echo", {"text": "hi"},
                                              waited=True), 30)
        finally:
            timer.cancel()
        return outcome

    try:
        here = asyncio.run(call(store, '{"answer": 42}'))
        assert here is not None and here["status"] == "Completed"
        assert here["response"] == {"answer": 42} and here["error"] is None
        # answered from the hub (on PostgreSQL the NOTIFY, heard on another connection, may
        # wake the waiter before the committing thread hands the hub the response)
        assert reads == [] or (store.is_postgres and len(reads) == 1)
        reads.clear()
        there = asyncio.run(call(other, '{"answer": 7}'))
        assert there is not None and there["response"] == {"answer": 7}
        assert len(reads) == 1  # read once, after the other process's announcement
        assert store.completions.waiting == 0  # nothing left behind
    finally:
        store.dispose()
        other.dispose()


def test_a_sync_call_completed_here_returns_its_response_without_a_read(
        database_url: str) -> None:
    """``wait_for_response`` (a business process's ``send_request_sync``): a success this
    process commits is answered with the response the hub kept; one another process
    commits is read."""
    store, other = SqlStore(database_url), SqlStore(database_url)
    store.upgrade()
    reads = _count_reads(store)
    store.completions.start_hearing()  # as a daemon's process is: its first look is skipped
    try:
        for completer, body in ((store, '{"answer": 42}'), (other, '{"answer": 7}')):
            mid = _accept(store)
            timer = threading.Timer(0.3, _claim_and_complete, args=(completer, body))
            timer.start()
            response = wait_for_response(store, mid, "Echo", 30, poll=NO_POLL, marked=True,
                                         fresh=True)
            timer.join()
            assert response.data == json.loads(body)
            if completer is other:
                assert reads == [mid]
            elif store.is_postgres:  # the NOTIFY may wake it before the hub has the response
                assert reads in ([], [mid])
            else:
                assert reads == []
            reads.clear()
    finally:
        store.dispose()
        other.dispose()


def test_a_wait_begun_on_a_queued_message_is_announced_as_urgent_work(store: SqlStore) -> None:
    """``wait_for_response`` marks the message waited for. A daemon that lingers before its
    next claim (it gathers messages arriving one by one) must hear that someone now waits,
    and claim at once: else each call of ``engine.client`` from another process waited the
    linger out (5 ms a call, against 1.3 ms with it; ``client_roundtrip_ms_p50``)."""
    heard: list[Announcement] = []
    store.db.announcer.add_callback(heard.append)
    claimed = store.enqueue(target="A", body_class=None, body="{}")
    store.claim("A", owner="daemon", now=utcnow(), lease_seconds=30, limit=1)
    queued = store.enqueue(target="A", body_class=None, body="{}")
    heard.clear()
    store.mark_waited(claimed)  # already in a worker's hands: nothing to claim
    assert heard == []
    store.mark_waited(queued)
    assert heard == [Announcement.work("A", urgent=True)]


@pytest.mark.postgres
def test_another_process_hears_that_a_queued_message_is_now_waited_for(
        pg_store: SqlStore) -> None:
    daemon_side = SqlStore(pg_store.engine.url.render_as_string(hide_password=False))
    try:
        heard: list[Announcement] = []
        daemon_side.db.announcer.add_callback(heard.append)
        daemon_side.hear_other_processes()
        queued = pg_store.enqueue(target="A", body_class=None, body="{}")
        wait_until(lambda: Announcement.work("A") in heard, 10, "the enqueue's NOTIFY")
        pg_store.mark_waited(queued)
        wait_until(lambda: Announcement.work("A", urgent=True) in heard, 10,
                   "an urgent NOTIFY for the waited-for message")
    finally:
        daemon_side.dispose()
