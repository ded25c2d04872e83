"""The purge of finished messages on a large ``message_header`` (issue 36; not part of the
test suite).

Fills a database with N finished requests (default 200,000: Completed, ended 60 days ago),
each with its response, one attempt and one event, by bulk insert (COPY on PostgreSQL,
executemany on SQLite), and 1 % more requests still Queued that the purge keeps; then times
:func:`engine.store.operator.purge` of everything older than 30 days, the code the daemon's
``retention_days`` purge runs, and the longest a batch held the write transaction (on
SQLite, the write lock every other writer waits for).

    python bench/purge.py                    # SQLite file in /tmp
    python bench/purge.py --pg-url postgresql+psycopg://postgres@127.0.0.1/encore_bench

bench/run.py's ``purge`` scenario gives the keys ``purge_200k_s`` and ``purge_200k_s_pg``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import text

from engine.store import operator
from engine.store.sql import SqlStore

COUNT = 200_000  # finished requests of the full and the --quick run alike (the key's name)
CHUNK = 20_000  # rows per insert batch
AGE = timedelta(days=60)  # how long ago the finished requests ended
KEEP = timedelta(days=30)  # the purge's --older-than
HEADER = ("id", "session_id", "source", "target", "kind", "body_class", "body", "status",
          "is_error", "time_created", "time_completed", "corresponding_id", "retry_needed",
          "attempts", "claim_token")
ATTEMPT = ("message_id", "attempt", "server", "started_at", "ended_at", "outcome")
EVENT = ("time_logged", "type", "config_name", "message_id", "session_id", "text")


def headers(count: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    """Request 2i-1 and its response 2i for i in 1..count, then count / 100 queued ones."""
    ended = now - AGE
    for i in range(1, count + 1):
        req, resp = 2 * i - 1, 2 * i
        yield (req, req, "api", "Orders", "request", None, f'{{"n": {i}}}', "Completed",
               False, ended, ended, resp, False, 1, 1)
        yield (resp, req, "Orders", "Orders", "response", None, '{"ok": true}', "Completed",
               False, ended, ended, req, False, 0, 0)
    for i in range(2 * count + 1, 2 * count + 1 + count // 100):
        yield (i, i, "api", "Orders", "request", None, "{}", "Queued", False, ended, None,
               None, False, 0, 0)


def attempts(count: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    ended = now - AGE
    for i in range(1, count + 1):
        yield (2 * i - 1, 1, "http://127.0.0.1:1/", ended, ended, "ok")


def events(count: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    ended = now - AGE
    for i in range(1, count + 1):
        yield (ended, "Info", "Orders", 2 * i - 1, 2 * i - 1, "delivered")


def fill(store: SqlStore, count: int, now: datetime) -> float:
    """Bulk insert the rows; the seconds it took."""
    started = time.perf_counter()
    tables = (("message_header", HEADER, headers), ("message_attempt", ATTEMPT, attempts),
              ("event_log", EVENT, events))
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        for table, columns, make in tables:
            _insert(cursor, store.is_postgres, table, columns, make(count, now))
        raw.commit()
    finally:
        raw.close()
    with store.engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    return time.perf_counter() - started


def _insert(cursor: Any, postgres: bool, table: str, columns: tuple[str, ...],
            rows: Iterator[tuple[Any, ...]]) -> None:
    if postgres:
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    batch: list[tuple[Any, ...]] = []
    for row in rows:
        batch.append(tuple(_sqlite(v) for v in row))
        if len(batch) == CHUNK:
            cursor.executemany(insert, batch)
            batch.clear()
    cursor.executemany(insert, batch)


def _sqlite(value: Any) -> Any:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f") if isinstance(value, datetime) else value


@contextlib.contextmanager
def timed_writes(store: SqlStore, holds: list[float]) -> Iterator[None]:
    """Record in ``holds`` the seconds each write transaction of ``store.db`` lasted, from
    BEGIN (IMMEDIATE on SQLite: the write lock) to its commit."""
    original = store.db.tx

    @contextlib.contextmanager
    def tx(*args: Any, **kwargs: Any) -> Iterator[Any]:
        started = time.perf_counter()
        with original(*args, **kwargs) as conn:
            yield conn
        holds.append(time.perf_counter() - started)

    store.db.tx = tx  # type: ignore[method-assign]
    try:
        yield
    finally:
        store.db.tx = original  # type: ignore[method-assign]


def scenario(url: str, count: int = COUNT) -> dict[str, Any]:
    """Fill ``url`` (wiped) and purge it: seconds of the fill and the purge, the counts, the
    longest and the median write transaction of a batch (seconds)."""
    store = _fresh(url)
    now = datetime.now(UTC)
    try:
        filled = fill(store, count, now)
        holds: list[float] = []
        started = time.perf_counter()
        with timed_writes(store, holds):
            counts = operator.purge(store, KEEP, now)
        took = time.perf_counter() - started
        assert counts.requests == count and counts.responses == count, counts
        holds.sort()
        return {"purge_s": took, "fill_s": filled, "counts": counts,
                "batches": len(holds), "longest_hold_s": holds[-1],
                "median_hold_s": holds[len(holds) // 2]}
    finally:
        store.dispose()


def _fresh(url: str) -> SqlStore:
    store = SqlStore(url)
    if store.is_postgres:
        with store.engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        store.dispose()
        store = SqlStore(url)
    store.upgrade()
    return store


def outcome(work: Path, pg_url: str | None) -> Any:
    """bench/run.py's ``purge`` scenario: ``purge_200k_s`` (SQLite, a file in ``work``) and,
    given ``pg_url``, ``purge_200k_s_pg`` (wiped). The same size with --quick."""
    from bench.report import Outcome

    out = Outcome()
    targets = [("", f"sqlite:///{work / 'purge.db'}")]
    if pg_url:
        targets.append(("_pg", pg_url))
    for suffix, url in targets:
        found = scenario(url)
        out.key(f"purge_200k_s{suffix}", "purge of 200,000 finished requests",
                found["purge_s"], "s",
                note=f"with responses, attempts, events; {found['batches']} batches, the "
                     f"longest write {found['longest_hold_s'] * 1000:.0f} ms; filled in "
                     f"{found['fill_s']:.0f} s")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--sqlite", default="/tmp/encore-bench-purge.db")
    parser.add_argument("--pg-url", default=None, help="measure PostgreSQL instead (wiped)")
    args = parser.parse_args()
    if args.pg_url:
        url = args.pg_url
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(args.sqlite + suffix).unlink(missing_ok=True)
        url = f"sqlite:///{args.sqlite}"
    found = scenario(url, args.count)
    print(f"{url.split(':')[0]}, {args.count:,} finished requests: filled in "
          f"{found['fill_s']:.1f} s; purged in {found['purge_s']:.2f} s ({found['counts']}); "
          f"{found['batches']} write transactions, longest {found['longest_hold_s'] * 1000:.1f}"
          f" ms, median {found['median_hold_s'] * 1000:.1f} ms; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
