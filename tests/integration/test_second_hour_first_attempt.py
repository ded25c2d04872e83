"""``first_attempt_at`` is ``min(message_attempt.started_at)`` for every message (issue 26,
point 2; docs/architecture.md): a FIFO item (pool_size 1, blocking) claims a batch and begins
attempt 1 of each message with the claim, but the messages behind a head that retries start much
later — their true start is recorded with the attempt, and the header's column with it, in
the same write, whether the attempt fails or succeeds, crash or not.

Exact on the virtual clock (SQLite file and PostgreSQL), then in real time through `encore
run`, killed -9 in the middle and started again."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from engine import BusinessOperation, Retry
from engine.message import JsonMessage
from engine.store.sql import SqlStore
from engine.testing import VirtualDaemon
from tests.acceptance.daemon import RunningDaemon, encore
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

HEAD_FAILS = 3  # the head of the queue is retried three times
BEHIND = 6  # messages queued behind it, each failing its first attempt once


class FailsFirst(BusinessOperation):
    """Fails the first ``fails`` attempts of each message (its body says how many), each
    attempt taking one second of the virtual clock."""

    request_class = JsonMessage
    harness: VirtualDaemon | None = None

    def on_message(self, request: Any) -> Any:
        if self.harness is not None:
            self.harness.clock.advance(1.0)
        if self.retry_count <= request.data["fails"]:
            raise Retry(f"attempt {self.retry_count} refused")
        return {"attempt": self.retry_count}


def first_attempt_mismatches(store: SqlStore, ids: list[int]) -> list[tuple[int, Any, Any]]:
    """(id, first_attempt_at, min(started_at)) of every message where they differ (None:
    no attempt yet)."""
    wrong = []
    for mid in ids:
        row = store.get_message(mid)
        assert row is not None
        first = min((a.started_at for a in store.attempts(mid)), default=None)
        if row.first_attempt_at != first:
            wrong.append((mid, row.first_attempt_at, first))
    return wrong


def test_first_attempt_at_is_the_true_start_behind_a_retrying_head(store: SqlStore) -> None:
    vd = VirtualDaemon.for_item("Fifo", FailsFirst,
                                {"retry_interval": 2, "failure_timeout": 100},
                                store=store, poll_interval=100.0)
    try:
        for host in vd.daemon.runners["Fifo"].hosts:
            host.harness = vd  # type: ignore[attr-defined]
        ids = [vd.send("Fifo", {"fails": HEAD_FAILS if i == 0 else 1})
               for i in range(1 + BEHIND)]
        vd.run()
        rows = [store.get_message(mid) for mid in ids]
        assert [r.status for r in rows] == ["Completed"] * len(ids)
        starts = {mid: [vd.at(a.started_at) for a in store.attempts(mid)] for mid in ids}
        # the head: attempts at 0, 2, 4, 6 (each 1 s); the next starts once it is done, at 7
        assert starts[ids[0]] == [0, 2, 4, 6]
        assert starts[ids[1]] == [7, 9]
        for mid in ids:
            assert vd.at(store.get_message(mid).first_attempt_at) == starts[mid][0], mid
        assert first_attempt_mismatches(store, ids) == []
    finally:
        vd.stop()


OPERATION = '''
from engine import BusinessOperation, Retry
from engine.message import JsonMessage


class FailsFirst(BusinessOperation):
    """Fails the first ``fails`` attempts of each message (its body says how many)."""

    request_class = JsonMessage

    def on_message(self, request):
        if self.retry_count <= request.data["fails"]:
            raise Retry(f"attempt {self.retry_count} refused")
        return {"attempt": self.retry_count}
'''
PRODUCTION = """
[production]
name = "FirstAttempt"
database = "{database}"
poll_interval = 0.05
lease_seconds = 1

[[items]]
name = "Fifo"
class = "second_hour_ops:FailsFirst"
[items.settings]
retry_interval = 0.4
failure_timeout = 60
"""


def queue_behind_a_retrying_head(database_url: str, tmp_path: Path) -> list[int]:
    """The production (its operation beside it), the database, and the head with the
    messages behind it queued before any daemon runs; their ids."""
    (tmp_path / "second_hour_ops.py").write_text(OPERATION)
    (tmp_path / "production.toml").write_text(PRODUCTION.format(database=database_url))
    encore("db", "upgrade", cwd=tmp_path)
    bodies = [{"fails": HEAD_FAILS if i == 0 else 1} for i in range(1 + BEHIND)]
    sent = encore("send", "Fifo", "--many", "-", "--json", cwd=tmp_path,
                  stdin="".join(json.dumps(b) + "\n" for b in bodies)).stdout
    first = json.loads(sent)["first_id"]
    return list(range(first, first + len(bodies)))


def all_completed(store: SqlStore, ids: list[int]) -> bool:
    return all(store.get_message(m).status == "Completed" for m in ids)


def test_first_attempt_at_holds_in_real_time(database_url: str, tmp_path: Path) -> None:
    ids = queue_behind_a_retrying_head(database_url, tmp_path)
    store = SqlStore(database_url)
    try:
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: all_completed(store, ids), 60, "every message completed")
            assert daemon.terminate() == 0, daemon.output
        assert first_attempt_mismatches(store, ids) == []
        assert [len(store.attempts(m)) for m in ids] == [HEAD_FAILS + 1] + [2] * BEHIND
        # the case happened: messages claimed with the head (time_processed is
        # their first claim) first started long after it, and failed that attempt
        late = [m for m in ids[1:] if (store.get_message(m).first_attempt_at
                                       - store.get_message(m).time_processed
                                       ).total_seconds() > 1.0]
        assert late, "no message was claimed well before its first attempt"
    finally:
        store.dispose()


def test_first_attempt_at_holds_in_real_time_through_a_crash(database_url: str,
                                                            tmp_path: Path) -> None:
    ids = queue_behind_a_retrying_head(database_url, tmp_path)
    store = SqlStore(database_url)
    try:
        # killed -9 while the head retries, with the messages behind it claimed (their
        # attempt 1 begun with the claim, at claim time) and not yet started
        with RunningDaemon(tmp_path) as crashed:
            wait_until(lambda: len(store.attempts(ids[0])) >= 2, 30, "the head's retry")
            crashed.kill()
        assert first_attempt_mismatches(store, ids) == []
        time.sleep(1.2)  # the dead daemon's claims expire (lease_seconds = 1)
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: all_completed(store, ids), 60, "every message completed")
            assert daemon.terminate() == 0, daemon.output
        assert first_attempt_mismatches(store, ids) == []
        assert all(len(store.attempts(m)) >= 2 for m in ids)
    finally:
        store.dispose()
