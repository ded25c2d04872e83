"""What the circuit breaker and the rate limit cost (issue 16, docs/guards.md).

Two measurements, each printed with the machine's load average:

1. **A rate-limit slot.** Slots taken one after another (and by 4 threads at once) from
   Encore's bucket (``SqlRateBuckets.take``: one ``UPDATE … RETURNING`` on ``item_rate``) and
   from pyrate-limiter's SQL buckets (``SQLiteBucket``, ``PostgresBucket``: a sliding-window
   log, one row per slot), on a SQLite file and on PostgreSQL. The limit is far above the
   rate reached, so nobody waits: the figure is the cost of asking. pyrate-limiter is not a
   dependency of Encore, only of the ``bench`` extra (``pip install -e '.[bench]'``);
   without it its rows say so.
2. **The no-op drain** of ``bench/drain.py`` (a queue filled first, then drained by a daemon
   in this process, ``bench.ops:NoopOperation``) with the breaker and the limiter off and on:
   ``breaker_threshold = 5`` (closed all along: what every successful attempt pays) and
   ``rate_limit = "1000000/s"`` (a slot per attempt, never a wait). The cost per message is
   the difference of the times per message.

    python bench/guards.py [--quick] [--pg-url postgresql+psycopg://...] [--only slots drain]

The PostgreSQL database named by ``--pg-url`` (or ``ENCORE_BENCH_POSTGRES_URL``) is wiped.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness as h
from bench.drain import ITEM, NOOP_BODY, NOOP_CLASS
from engine.clock import utcnow

GUARDS: dict[str, dict[str, Any]] = {
    "off": {},
    "breaker": {"breaker_threshold": 5},
    "rate limit": {"rate_limit": "1000000/s"},
    "both": {"breaker_threshold": 5, "rate_limit": "1000000/s"},
}
THREADS = 4  # concurrent askers in the contended slot measurement
REFUSALS = [0]  # pyrate-limiter's refusals under contention, asked again


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- 1. one slot ------------------------------------------------------------------------------

def per_second(take: Callable[[], object], count: int, threads: int = 1) -> float:
    """Slots per second when ``threads`` threads each take ``count // threads``."""
    each = count // threads
    start = threading.Barrier(threads + 1)

    def run() -> None:
        start.wait()
        for _ in range(each):
            take()
    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    return each * threads / (time.perf_counter() - t0)


def encore_taker(url: str) -> tuple[Callable[[], object], Callable[[], None]]:
    store = h.fresh_store(url)
    store.rate_buckets.ensure(ITEM, capacity=1_000_000, now=utcnow())

    def take() -> object:
        return store.rate_buckets.take(ITEM, capacity=1_000_000, per_second=1e6, now=utcnow())
    return take, store.dispose


def pyrate_taker(url: str) -> tuple[Callable[[], object], Callable[[], None]]:
    from pyrate_limiter import Duration, PostgresBucket, Rate, RateItem, SQLiteBucket

    rates = [Rate(1_000_000, Duration.SECOND)]
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        bucket: Any = SQLiteBucket.init_from_file(rates, table="bench", db_path=path,
                                                  use_file_lock=False)
        bucket.conn.execute("PRAGMA journal_mode=WAL")
        bucket.conn.execute("PRAGMA synchronous=NORMAL")
        close: Callable[[], None] = bucket.conn.close
    else:
        from psycopg_pool import ConnectionPool

        h.reset_postgres(url)
        pool = ConnectionPool(url.replace("postgresql+psycopg://", "postgresql://"),
                              min_size=THREADS, max_size=THREADS, open=True)
        bucket = PostgresBucket(pool, "bench", rates)
        close = pool.close

    def take() -> object:
        # Its PostgreSQL bucket refuses at once when another caller holds the table lock
        # (LOCK … NOWAIT): ask again, as its Limiter does, until a slot is given.
        while not bucket.put(RateItem(ITEM, int(datetime.now(UTC).timestamp() * 1000))):
            REFUSALS[0] += 1
        return None
    return take, close


def slots(work: Path, pg_url: str | None, count: int) -> None:
    print(f"\n## A rate-limit slot (n = {count:,}; load average {loadavg()})")
    print("| bucket | database | 1 thread, slots/s | µs per slot | "
          f"{THREADS} threads at once, slots/s |")
    print("|---|---|---|---|---|")
    backends = [("SQLite file", h.sqlite_url(work, "slots.db"))]
    if pg_url:
        backends.append(("PostgreSQL", pg_url))
    for name, make in (("Encore item_rate", encore_taker),
                       ("pyrate-limiter", pyrate_taker)):
        for label, url in backends:
            if url.startswith("sqlite"):
                Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
            try:
                take, close = make(url)
            except ImportError as exc:
                print(f"| {name} | {label} | not installed ({exc.name}) | | |")
                continue
            try:
                take()  # connections open, tables created
                one = per_second(take, count)
                many = _contended(take, count)
            finally:
                close()
            print(f"| {name} | {label} | {one:,.0f} | {1e6 / one:,.0f} | {many} |")


def _contended(take: Callable[[], object], count: int) -> str:
    REFUSALS[0] = 0
    rate = per_second(take, count, THREADS)
    refused = f" ({REFUSALS[0]:,} refusals asked again)" if REFUSALS[0] else ""
    return f"{rate:,.0f}{refused}"


# -- 2. the drain -----------------------------------------------------------------------------

def drain(url: str, count: int, settings: dict[str, Any], pool: int) -> float:
    """Messages/s of a no-op drain of ``count`` messages with item ``settings`` (``url``: a
    SQLite file that does not exist yet, or the PostgreSQL database, wiped)."""
    store = h.fresh_store(url)
    try:
        prod = h.load(h.production_text(database=url, item=ITEM, cls=NOOP_CLASS,
                                        pool_size=pool, settings=settings))
        store.set_item_enabled(ITEM, False, reason="bench: fill the queue first", now=utcnow())
        h.fill(store, prod, ITEM, NOOP_BODY, count)
        with h.running_daemon(prod, store):
            time.sleep(0.5)
            store.set_item_enabled(ITEM, True, reason=None, now=utcnow())
            h.wait_finished(store, ITEM, count, timeout=max(600.0, count / 10), poll=0.2)
        w = h.window(store, ITEM)
        return h.rate(count, w.first_processed, w.last_completed)
    finally:
        store.dispose()


def drains(work: Path, pg_url: str | None, count: int, rounds: int) -> None:
    print(f"\n## No-op drain with the guards off and on (n = {count:,}, best of {rounds}; "
          f"load average {loadavg()})")
    print("| database | pool | guards | msg/s | µs per message | cost vs off, µs/msg |")
    print("|---|---|---|---|---|---|")
    cases: list[tuple[str, str | None, int]] = [("SQLite", None, 1), ("SQLite", None, 4)]
    if pg_url:
        cases += [("PostgreSQL", pg_url, 1), ("PostgreSQL", pg_url, 4)]
    files = iter(range(1_000_000))
    for label, url, pool in cases:
        base = None
        for name, settings in GUARDS.items():
            best = max(drain(url or h.sqlite_url(work, f"drain-{next(files)}.db"), count,
                             settings, pool) for _ in range(rounds))
            us = 1e6 / best
            base = us if base is None else base
            cost = "-" if name == "off" else f"{us - base:+,.0f}"
            print(f"| {label} | {pool} | {name} | {best:,.0f} | {us:,.0f} | {cost} |",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, one round")
    parser.add_argument("--pg-url", default=os.environ.get("ENCORE_BENCH_POSTGRES_URL"))
    parser.add_argument("--only", nargs="*", choices=("slots", "drain"),
                        default=["slots", "drain"])
    args = parser.parse_args()
    print(f"load average {loadavg()} at the start; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="encore-bench-guards-") as tmp:
        work = Path(tmp)
        if "slots" in args.only:
            slots(work, args.pg_url, 2_000 if args.quick else 10_000)
        if "drain" in args.only:
            drains(work, args.pg_url, 2_000 if args.quick else 5_000, 1 if args.quick else 3)
    print(f"\nload average {loadavg()} at the end")


if __name__ == "__main__":
    main()
