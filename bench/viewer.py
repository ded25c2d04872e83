"""The Message Viewer's queries on a large ``message_header`` (not part of the test suite).

Fills a database with N messages (default 1,000,000: five items, 90 % Completed, 5 % Error,
3 % Queued, 1 % Suspended, 1 % Discarded, created over 30 days) by bulk insert, then times
the portal's own queries (:mod:`engine.store.viewer`): the first page, a deep page, each
filter, and the count a bulk resend asks for. Prints one line per query: the median of
``--repeat`` runs, in milliseconds.

    python bench/viewer.py                       # SQLite file in /tmp, 1,000,000 messages
    python bench/viewer.py --pg-url postgresql+psycopg://postgres@127.0.0.1/encore_bench
    python bench/viewer.py --reuse               # keep the filled database of a last run
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import func, select, text  # noqa: E402

from engine.store import viewer  # noqa: E402
from engine.store.models import message_header  # noqa: E402
from engine.store.sql import SqlStore  # noqa: E402
from engine.store.viewer import MessageFilter  # noqa: E402

ITEMS = ("Payments", "Orders", "Stock", "Mail", "Ledger")
STATUSES = (("Completed", 0.90), ("Error", 0.05), ("Queued", 0.03), ("Suspended", 0.01),
            ("Discarded", 0.01))
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
SPAN = timedelta(days=30)  # messages are created over this long, ending now
CHUNK = 20_000  # rows per insert batch
COLUMNS = ("id", "session_id", "source", "target", "kind", "body_class", "body", "status",
           "is_error", "error_text", "time_created", "time_completed", "retry_needed",
           "attempts", "claim_token")


def rows(count: int, seed: int = 7) -> Iterator[tuple[Any, ...]]:
    """``count`` message rows in id order; one in 200,000 carries the word 'needle'."""
    rng = random.Random(seed)
    start = datetime.now(timezone.utc) - SPAN
    step = SPAN / count
    statuses = [s for s, _ in STATUSES]
    weights = [w for _, w in STATUSES]
    for i in range(1, count + 1):
        status = rng.choices(statuses, weights)[0]
        created = start + step * i
        word = "needle" if i % 200_000 == 0 else rng.choice(WORDS)
        body = json.dumps({"order": f"{word}-{i}", "cents": rng.randint(1, 99_999)})
        error = f"HTTP 503 from service ({word})" if status == "Error" else None
        done = created + timedelta(seconds=1) if status != "Queued" else None
        yield (i, i, "api", ITEMS[i % len(ITEMS)], "request", "engine.message:JsonMessage",
               body, status, status == "Error", error, created, done, False,
               0 if status == "Queued" else 1, 0)


def fill(store: SqlStore, count: int) -> None:
    """Bulk insert ``count`` messages (COPY on PostgreSQL, executemany on SQLite)."""
    started = time.perf_counter()
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if store.is_postgres:
            with cursor.copy(f"COPY message_header ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                for row in rows(count):
                    copy.write_row(row)
            cursor.execute("SELECT setval(pg_get_serial_sequence('message_header', 'id'), "
                           "%s)", (count,))
        else:
            cursor.execute("BEGIN")
            insert = (f"INSERT INTO message_header ({', '.join(COLUMNS)}) "
                      f"VALUES ({', '.join('?' * len(COLUMNS))})")
            batch: list[tuple[Any, ...]] = []
            for row in rows(count):
                batch.append(row[:10] + tuple(_sqlite_time(t) for t in row[10:12]) + row[12:])
                if len(batch) == CHUNK:
                    cursor.executemany(insert, batch)
                    batch.clear()
            cursor.executemany(insert, batch)
        raw.commit()
    finally:
        raw.close()
    with store.engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    print(f"inserted {count:,} messages in {time.perf_counter() - started:.1f} s",
          file=sys.stderr)


def _sqlite_time(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")


def queries(store: SqlStore, count: int) -> list[tuple[str, Callable[[], Any]]]:
    """(name, call) of every query measured."""
    now = datetime.now(timezone.utc)
    middle = count // 2
    day = MessageFilter(since=now - timedelta(days=16), until=now - timedelta(days=15))
    page = viewer.messages_page
    return [
        ("page 1, no filter", lambda: page(store, MessageFilter())),
        ("deep page (before = middle id)", lambda: page(store, MessageFilter(), before=middle)),
        ("target", lambda: page(store, MessageFilter(target="Stock"))),
        ("target + status Error", lambda: page(store, MessageFilter(target="Stock",
                                                                   status="Error"))),
        ("status Error (5 %)", lambda: page(store, MessageFilter(status="Error"))),
        ("status Suspended (1 %)", lambda: page(store, MessageFilter(status="Suspended"))),
        ("status Aborted (no such row: reads every row)",
         lambda: page(store, MessageFilter(status="Aborted"))),
        ("errors=1", lambda: page(store, MessageFilter(errors=True))),
        ("session", lambda: page(store, MessageFilter(session_id=middle))),
        ("since/until: one day, 15 days ago", lambda: page(store, day)),
        ("since: last hour", lambda: page(store, MessageFilter(since=now - timedelta(hours=1)))),
        ("q: common word (first page)", lambda: page(store, MessageFilter(q="bravo"))),
        ("q: rare word (5 in 1M: full scan)", lambda: page(store, MessageFilter(q="needle"))),
        ("count for bulk resend: target + status Error",
         lambda: viewer.count_messages(store, MessageFilter(target="Stock", status="Error"),
                                       resendable=True)),
        ("count for bulk resend: status Suspended",
         lambda: viewer.count_messages(store, MessageFilter(status="Suspended"),
                                       resendable=True)),
    ]


def measure(call: Callable[[], Any], repeat: int) -> float:
    """Median milliseconds of ``repeat`` runs, after one warm-up run."""
    call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--sqlite", default="/tmp/encore-bench-viewer.db")
    parser.add_argument("--pg-url", default=None, help="measure PostgreSQL instead (wiped)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reuse", action="store_true",
                        help="keep the database if it already holds --count messages")
    args = parser.parse_args()
    url = args.pg_url or f"sqlite:///{args.sqlite}"
    store = SqlStore(url)
    if not _filled(store, args.count, args.reuse):
        _wipe(store, args)
        store = SqlStore(url)
        store.upgrade()
        fill(store, args.count)
    print(f"{store.engine.dialect.name}, {args.count:,} messages, median of {args.repeat}")
    for name, call in queries(store, args.count):
        print(f"  {measure(call, args.repeat):9.2f} ms  {name}")
    store.dispose()


def _filled(store: SqlStore, count: int, reuse: bool) -> bool:
    if not reuse:
        return False
    try:
        with store.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(message_header)
                                ).scalar_one() == count
    except Exception:  # no table yet
        return False


def _wipe(store: SqlStore, args: argparse.Namespace) -> None:
    if store.is_postgres:
        with store.engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(args.sqlite + suffix).unlink(missing_ok=True)
    store.dispose()


if __name__ == "__main__":
    main()
