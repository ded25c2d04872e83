"""The purge reads by index (migration 0014), on SQLite and PostgreSQL: no statement of a
batch reads ``message_header`` from end to end, however large it grows (issue 36: a batch
of 500 read the whole table to find the responses of its requests, and the purge took
quadratic time)."""
from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event

from engine.clock import utcnow
from engine.store import operator
from engine.store.operator import PurgeCounts
from engine.store.sql import SqlStore
from engine.store.statuses import Status
from tests.claiming import claim_one


def _finish(store: SqlStore, count: int, *, ended_days_ago: float) -> list[int]:
    """``count`` requests to Orders completed with a response ``ended_days_ago``."""
    when = utcnow() - timedelta(days=ended_days_ago)
    ids = []
    for n in range(count):
        message_id = store.enqueue(target="Orders", body_class=None, body=f'{{"n": {n}}}', source="test",
                                   now=when)
        row = claim_one(store, "Orders", owner="me", now=when, lease_seconds=60)
        assert row is not None and row.id == message_id
        store.complete(row, response_class=None, response_body='{"ok": true}', now=when)
        ids.append(message_id)
    return ids


@pytest.fixture
def statements(store: SqlStore) -> Iterator[list[tuple[str, Any]]]:
    """Every SELECT and DELETE the store's engine runs while the test runs."""
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any,
               _many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "DELETE")):
            seen.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    yield seen
    event.remove(store.engine, "before_cursor_execute", record)


def _plan(store: SqlStore, statement: str, parameters: Any) -> str:
    """The database's plan of ``statement``; on PostgreSQL with sequential scans priced out,
    so that a plan still showing one means no index could serve (a table this small would
    otherwise be read whole because that is cheapest)."""
    with store.engine.connect() as conn:
        if store.is_postgres:
            conn.exec_driver_sql("SET enable_seqscan = off")
            rows = conn.exec_driver_sql(f"EXPLAIN {statement}", parameters).all()
            conn.rollback()
            return "\n".join(r[0] for r in rows)
        rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
        return "\n".join(str(r[-1]) for r in rows)


def _reads_whole_header(plan: str) -> bool:
    return "Seq Scan on message_header" in plan or any(
        line.strip().startswith("SCAN message_header") and "USING" not in line
        for line in plan.splitlines())


def test_no_statement_of_a_purge_reads_the_whole_message_table(
        store: SqlStore, statements: list[tuple[str, Any]]) -> None:
    old = _finish(store, 6, ended_days_ago=60)
    kept = _finish(store, 2, ended_days_ago=1)
    statements.clear()
    counts = operator.purge(store, timedelta(days=30), utcnow(), batch=4)
    assert counts.requests == 6 and counts.responses == 6
    assert all(store.get_message(i) is None for i in old)
    assert all(store.get_message(i).status == Status.COMPLETED for i in kept)  # type: ignore[union-attr]
    on_header = [(s, p) for s, p in statements if "message_header" in s]
    assert len(on_header) >= 4  # two batches: their requests, responses and deletions
    scans = {s: plan for s, p in on_header
             if _reads_whole_header(plan := _plan(store, s, p))}
    assert not scans, scans


def test_a_dry_run_counts_every_batch_and_deletes_nothing(store: SqlStore) -> None:
    """The dry run deletes nothing, so each batch must go on from where the last one
    stopped rather than from the first old request (it would count the first batch for
    ever)."""
    _finish(store, 5, ended_days_ago=60)
    expected = PurgeCounts(requests=5, responses=5, attempts=0, events=0)
    dry = operator.purge(store, timedelta(days=30), utcnow(), dry_run=True, batch=2)
    assert (dry.requests, dry.responses) == (5, 5)
    assert operator.purge(store, timedelta(days=30), utcnow(), batch=2) == dry
    assert (dry.requests, dry.responses) == (expected.requests, expected.responses)
