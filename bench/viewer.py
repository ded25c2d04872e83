"""The Message Viewer's queries on a large ``message_header`` (not part of the test suite).

Fills a database with N messages (default 1,000,000: five items, 90 % Completed, 5 % Error,
3 % Queued, 1 % Suspended, 1 % Discarded, created over 30 days) and their search properties
(``order``, text, unique; ``cents``, a number) by bulk insert (COPY on PostgreSQL,
executemany on SQLite), then times the portal's own queries (:mod:`engine.store.viewer`):
the first page, a deep page, each filter, property searches, and the count a bulk resend
asks for. Prints one line per query: the median of ``--repeat`` runs, in milliseconds; then
the two key figures of issue 23 (bench/run.py ``--only viewer``): ``viewer_prop_search_ms``,
an indexed property search that finds one message, and ``viewer_export_rows_per_s``, a CSV
export of one item's messages (a fifth of them) streamed as the portal streams it.

    python bench/viewer.py                       # SQLite file in /tmp, 1,000,000 messages
    python bench/viewer.py --pg-url postgresql+psycopg://postgres@127.0.0.1/encore_bench
    python bench/viewer.py --reuse               # keep the filled database of a last run
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import func, select, text

from engine.portal.export import message_lines
from engine.store import viewer
from engine.store.models import message_header
from engine.store.sql import SqlStore
from engine.store.viewer import MessageFilter, PropertyFilter

ITEMS = ("Payments", "Orders", "Stock", "Mail", "Ledger")
STATUSES = (("Completed", 0.90), ("Error", 0.05), ("Queued", 0.03), ("Suspended", 0.01),
            ("Discarded", 0.01))
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
SPAN = timedelta(days=30)  # messages are created over this long, ending now
CHUNK = 20_000  # rows per insert batch
COLUMNS = ("id", "session_id", "source", "target", "kind", "body_class", "body", "status",
           "is_error", "error_text", "time_created", "time_completed", "retry_needed",
           "attempts", "claim_token")
PROPERTY_COLUMNS = ("message_id", "name", "value_text", "value_num")
NEEDLE_EVERY = 200_000  # one message in this many has the word 'needle'


def rows(count: int, seed: int = 7) -> Iterator[tuple[Any, ...]]:
    """``count`` message rows in id order; one in 200,000 carries the word 'needle', and
    the middle one (the property search's)."""
    rng = random.Random(seed)
    start = datetime.now(UTC) - SPAN
    step = SPAN / count
    statuses = [s for s, _ in STATUSES]
    weights = [w for _, w in STATUSES]
    for i in range(1, count + 1):
        status = rng.choices(statuses, weights)[0]
        created = start + step * i
        word = "needle" if i % NEEDLE_EVERY == 0 or i == count // 2 else rng.choice(WORDS)
        body = json.dumps({"order": f"{word}-{i}", "cents": rng.randint(1, 99_999)})
        error = f"HTTP 503 from service ({word})" if status == "Error" else None
        done = created + timedelta(seconds=1) if status != "Queued" else None
        yield (i, i, "api", ITEMS[i % len(ITEMS)], "request", "engine.message:JsonMessage",
               body, status, status == "Error", error, created, done, False,
               0 if status == "Queued" else 1, 0)


def properties_of(row: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The search-property rows of a message row: ``order`` (text) and ``cents`` (a number),
    as intake writes them for ``search_properties = ["order", "cents"]``."""
    body = json.loads(row[6])
    return [(row[0], "order", body["order"], None),
            (row[0], "cents", str(body["cents"]), float(body["cents"]))]


def fill(store: SqlStore, count: int) -> None:
    """Bulk insert ``count`` messages and their properties (COPY on PostgreSQL,
    executemany on SQLite)."""
    started = time.perf_counter()
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if store.is_postgres:
            with cursor.copy(f"COPY message_header ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                for row in rows(count):
                    copy.write_row(row)
            with cursor.copy(f"COPY message_property ({', '.join(PROPERTY_COLUMNS)}) "
                             "FROM STDIN") as copy:
                for row in rows(count):
                    for prop in properties_of(row):
                        copy.write_row(prop)
            cursor.execute("SELECT setval(pg_get_serial_sequence('message_header', 'id'), "
                           "%s)", (count,))
        else:
            cursor.execute("BEGIN")
            insert = (f"INSERT INTO message_header ({', '.join(COLUMNS)}) "
                      f"VALUES ({', '.join('?' * len(COLUMNS))})")
            insert_prop = (f"INSERT INTO message_property ({', '.join(PROPERTY_COLUMNS)}) "
                           "VALUES (?, ?, ?, ?)")
            batch: list[tuple[Any, ...]] = []
            props: list[tuple[Any, ...]] = []
            for row in rows(count):
                batch.append(row[:10] + tuple(_sqlite_time(t) for t in row[10:12]) + row[12:])
                props += properties_of(row)
                if len(batch) == CHUNK:
                    cursor.executemany(insert, batch)
                    cursor.executemany(insert_prop, props)
                    batch.clear()
                    props.clear()
            cursor.executemany(insert, batch)
            cursor.executemany(insert_prop, props)
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
    now = datetime.now(UTC)
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
        ("prop.order = one message (indexed)", lambda: page(store, needle(count))),
        ("prop.cents.gt=99990 (range, indexed)", lambda: page(store, MessageFilter(
            props=(PropertyFilter("cents", "gt", "99990"),)))),
        ("prop.order + target + status (indexed, ANDed)", lambda: page(store, MessageFilter(
            target=ITEMS[(count // 2) % len(ITEMS)], props=needle(count).props))),
        ("body.order = one message within target Stock (no index)",
         lambda: page(store, MessageFilter(target="Stock", body=(("order", "needle-x"),)))),
        ("sort=duration, first page", lambda: page(store, MessageFilter(sort="duration"))),
        ("sort=target asc, first page", lambda: page(store, MessageFilter(
            sort="target", descending=False))),
    ]


def needle(count: int) -> MessageFilter:
    """The search for the middle message by its ``order`` property."""
    return MessageFilter(props=(PropertyFilter("order", "eq", f"needle-{count // 2}"),))


def prop_search_ms(store: SqlStore, count: int, repeat: int) -> float:
    """viewer_prop_search_ms: the median time of an indexed property search that finds the
    one message holding ``order = needle-<count / 2>``."""
    found = viewer.messages_page(store, needle(count)).rows
    assert [r["id"] for r in found] == [count // 2], found
    return measure(lambda: viewer.messages_page(store, needle(count)), repeat)


def export_rows_per_s(store: SqlStore) -> tuple[float, int]:
    """viewer_export_rows_per_s: rows per second of a CSV export of every message of one
    item (the text chunks the portal's response streams, counted as they come)."""
    started = time.perf_counter()
    rows_ = sum(chunk.count("\r\n") for chunk in message_lines(
        store, MessageFilter(target="Stock"), "csv")) - 1  # the header line
    return rows_ / (time.perf_counter() - started), rows_


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
    print(f"{store.engine.dialect.name}, {args.count:,} messages, median of {args.repeat}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, call in queries(store, args.count):
        print(f"  {measure(call, args.repeat):9.2f} ms  {name}")
    rate, exported = export_rows_per_s(store)
    print(f"viewer_prop_search_ms = {prop_search_ms(store, args.count, args.repeat):.2f}  "
          "(target ≤ 100)")
    print(f"viewer_export_rows_per_s = {rate:,.0f}  ({exported:,} rows; target ≥ 20,000)")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    store.dispose()


FULL_COUNT = 1_000_000  # messages of bench/run.py's viewer scenario
QUICK_COUNT = 100_000  # with --quick: filling a million takes minutes, not the ~30 s allowed


def outcome(work: Path, quick: bool, pg_url: str | None) -> Any:
    """bench/run.py's ``viewer`` scenario: the key figures on SQLite (a file in ``work``)
    and, given ``pg_url``, on PostgreSQL (wiped)."""
    from bench.report import Outcome

    count = QUICK_COUNT if quick else FULL_COUNT
    out = Outcome()
    targets = [("", f"sqlite:///{work / 'viewer.db'}")]
    if pg_url:
        targets.append(("_pg", pg_url))
    for suffix, url in targets:
        found = scenario(url, count)
        where = f"{count:,} messages" + (" (--quick: a tenth of the full run)" if quick else "")
        out.key(f"viewer_prop_search_ms{suffix}", "indexed property search, one message",
                found["prop_search_ms"], "ms", note=where)
        out.key(f"viewer_export_rows_per_s{suffix}", "CSV export of one item's messages",
                found["export_rows_per_s"], "rows/s",
                note=f"{found['exported']:,} rows; filled in {found['fill_s']:.0f} s")
    return out


def scenario(url: str, count: int, *, repeat: int = 5) -> dict[str, Any]:
    """bench/run.py's ``viewer`` scenario on ``url`` (wiped): the two key figures and the
    time the fill took."""
    store = SqlStore(url)
    if store.is_postgres:
        with store.engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        store.dispose()
        store = SqlStore(url)
    store.upgrade()
    started = time.perf_counter()
    fill(store, count)
    filled = time.perf_counter() - started
    try:
        rate, exported = export_rows_per_s(store)
        return {"prop_search_ms": prop_search_ms(store, count, repeat),
                "export_rows_per_s": rate,
                "exported": exported, "fill_s": filled}
    finally:
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
