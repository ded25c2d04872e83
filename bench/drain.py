"""Drain and intake scenarios (the hot-path issue): a queue filled first and then drained by
an in-process daemon, the daemon's CPU per message, pgqueuer's drain as a peer on
PostgreSQL, and the intake alone (``send_message`` one by one, ``send_messages`` in
batches)."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import harness as h
from bench import pgq
from bench.report import Outcome
from engine.client import send_message
from engine.clock import utcnow
from engine.config.production import ProductionConfig

ITEM = "Noop"
NOOP_CLASS = "bench.ops:NoopOperation"
NOOP_BODY = {"n": 1}
SETTLE_S = 0.5  # seconds the daemon runs, item disabled, before the drain is timed
DRAIN_POLL = 0.2  # seconds between two looks at the counts: the waiting loop stays cheap
INTAKE_BATCH = 500  # messages per send_messages call for intake_many_msgs_per_s


@dataclass(frozen=True)
class Drain:
    """One drain: messages/s from the first claim to the last completion (read back from the
    table), the process's CPU per message meanwhile, and how fast the queue was filled."""

    count: int
    msgs_per_s: float
    cpu_ms_per_msg: float
    seconds: float
    fill_msgs_per_s: float
    not_completed: int


def noop_production(url: str, pool: int = 1) -> ProductionConfig:
    return h.load(h.production_text(database=url, item=ITEM, cls=NOOP_CLASS, pool_size=pool))


def drain(url: str, count: int, pool: int = 1, *, production: ProductionConfig | None = None,
          item: str = ITEM, body: dict[str, Any] | None = None) -> Drain:
    """Fill the queue with ``count`` no-op messages (``send_messages``, item disabled), start
    a daemon in this process, let it settle, then enable the item and time the drain. CPU is
    ``time.process_time()`` of this process from the enable to the end of the wait: the
    daemon's threads plus a waiting loop that looks every ``DRAIN_POLL`` s. ``production``,
    ``item`` and ``body``: drain another item's messages instead (the SOAP one)."""
    store = h.fresh_store(url)
    try:
        prod = production or noop_production(url, pool)
        body = NOOP_BODY if body is None else body
        store.set_item_enabled(item, False, reason="bench: fill the queue first", now=utcnow())
        fill_s = h.fill(store, prod, item, body, count)
        with h.running_daemon(prod, store):
            time.sleep(SETTLE_S)
            cpu0 = time.process_time()
            store.set_item_enabled(item, True, reason=None, now=utcnow())
            h.wait_finished(store, item, count, timeout=max(600.0, count / 10),
                            poll=DRAIN_POLL)
            cpu = time.process_time() - cpu0
        w = h.window(store, item)
    finally:
        store.dispose()
    return Drain(count=count, msgs_per_s=h.rate(count, w.first_processed, w.last_completed),
                 cpu_ms_per_msg=cpu / count * 1000,
                 seconds=(w.last_completed - w.first_processed).total_seconds(),
                 fill_msgs_per_s=count / fill_s, not_completed=w.errors)


def _drain_note(d: Drain) -> str:
    note = (f"n={d.count:,} queued first ({d.fill_msgs_per_s:,.0f} msg/s through "
            f"send_messages ×{h.FILL_BATCH}), drained in {d.seconds:.2f} s")
    return note + (f"; {d.not_completed} NOT Completed" if d.not_completed else "")


def sqlite_drain(work: Path, count: int) -> Outcome:
    """noop_drain_msgs_per_s and cpu_ms_per_msg: SQLite, pool 1."""
    out = Outcome()
    d = drain(h.sqlite_url(work, "drain.db"), count)
    out.key("noop_drain_msgs_per_s", "no-op drain, pool 1, SQLite", d.msgs_per_s, "msg/s",
            _drain_note(d))
    out.key("cpu_ms_per_msg", "CPU per message during that drain", d.cpu_ms_per_msg, "ms",
            f"time.process_time() of the bench process (the daemon's threads, a {DRAIN_POLL:g} s "
            "waiting loop) from the enable to the end of the wait")
    return out


def pg_drain(pg_url: str | None, count: int) -> Outcome:
    """noop_drain_msgs_per_s_pg and pgqueuer_drain_ratio: the same drain on PostgreSQL, then
    pgqueuer's no-op drain of as many jobs on the same (wiped) database."""
    out = Outcome()
    if pg_url is None:
        for key in ("noop_drain_msgs_per_s_pg", "pgqueuer_drain_ratio"):
            out.key(key, "PostgreSQL not configured", None,
                    note="pass --pg-url or set ENCORE_BENCH_POSTGRES_URL")
        return out
    d = drain(pg_url, count)
    out.key("noop_drain_msgs_per_s_pg", "no-op drain, pool 1, PostgreSQL", d.msgs_per_s,
            "msg/s", _drain_note(d))
    out.info("CPU per message during that drain (bench process)", d.cpu_ms_per_msg, "ms",
             "PostgreSQL's own CPU not included")
    why_not = pgq.unavailable()
    peer = None
    if why_not is None:
        try:
            peer = pgq.drain(pg_url, count)
        except Exception as exc:  # an optional peer: its key goes null
            why_not = f"pgqueuer's drain failed: {type(exc).__name__}: {exc}"
    if peer is None:
        print(f"[bench] pgqueuer_drain_ratio is null: {why_not}", file=sys.stderr, flush=True)
        out.key("pgqueuer_drain_ratio", "pgqueuer not available", None, note=why_not or "")
        return out
    out.key("pgqueuer_drain_ratio", "Encore's PostgreSQL drain ÷ pgqueuer's no-op drain",
            d.msgs_per_s / peer.msgs_per_s,
            note=f"{d.msgs_per_s:,.0f} vs {peer.msgs_per_s:,.0f} msg/s, n={count:,}")
    out.info(f"pgqueuer {peer.version} no-op drain, batch size {peer.batch_size}",
             peer.msgs_per_s, "msg/s",
             f"{peer.loop} (see bench/pgq.py); "
             f"first job started → drain returned in {peer.seconds:.2f} s; CPU "
             f"{peer.cpu_ms_per_msg:.2f} ms/job; enqueued at {peer.enqueue_msgs_per_s:,.0f} "
             "jobs/s")
    return out


# -- intake ------------------------------------------------------------------------------------

def intake_one_by_one(url: str, count: int) -> float:
    """Messages/s of ``send_message`` in a loop: one committed transaction each, no daemon."""
    store = h.fresh_store(url)
    try:
        prod = noop_production(url)
        send_message(store, prod, ITEM, NOOP_BODY, source="bench-warm-up")  # connection open
        t0 = time.perf_counter()
        for _ in range(count):
            send_message(store, prod, ITEM, NOOP_BODY, source="bench")
        return count / (time.perf_counter() - t0)
    finally:
        store.dispose()


def intake_batched(url: str, count: int, batch: int = INTAKE_BATCH) -> float:
    """Messages/s of ``send_messages``, ``batch`` messages per call (one transaction each)."""
    store = h.fresh_store(url)
    try:
        prod = noop_production(url)
        send_message(store, prod, ITEM, NOOP_BODY, source="bench-warm-up")  # connection open
        return count / h.fill(store, prod, ITEM, NOOP_BODY, count, batch)
    finally:
        store.dispose()


def intake(work: Path, one: int, many: int) -> Outcome:
    """intake_msgs_per_s and intake_many_msgs_per_s: SQLite, durable, no daemon."""
    out = Outcome()
    out.key("intake_msgs_per_s", "send_message one by one, SQLite (durable)",
            intake_one_by_one(h.sqlite_url(work, "intake.db"), one), "msg/s",
            f"n={one:,}, one commit each, no daemon")
    out.key("intake_many_msgs_per_s", f"send_messages in batches of {INTAKE_BATCH}, SQLite",
            intake_batched(h.sqlite_url(work, "intake-many.db"), many), "msg/s",
            f"n={many:,}, one commit per batch, no daemon")
    return out
