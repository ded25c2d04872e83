"""Throughput scenarios: SOAP overhead against bare zeep, the no-op ceiling, pool scaling,
and two daemons on one PostgreSQL database."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import requests
import zeep
from sqlalchemy import insert

from adapters.base import AttemptContext
from adapters.soap import SoapAdapter
from bench import drain
from bench import harness as h
from bench.report import Outcome
from engine.clock import utcnow
from engine.store.models import message_header

SOAP_BODY = {"operation": "GetResponse", "args": {"text": "x"}}
NOOP_BODY = {"n": 1}
HTTP_GET = {"method": "GET"}


@dataclass(frozen=True)
class Sizes:
    """How many messages each scenario sends (``--quick`` or full)."""

    soap: int
    soap_slow: int  # against a SOAP server that answers after SLOW_SOAP_MS
    noop: int
    pool1: int
    pool16: int
    pg_two: int
    history: int  # finished messages already in the table for the "with history" row
    timing_runs: int
    idle_window_s: float
    drain: int  # queued first, then drained (SQLite)
    drain_pg: int  # the same on PostgreSQL, and pgqueuer's drain
    intake: int  # send_message one by one
    intake_many: int  # send_messages in batches


QUICK = Sizes(soap=1000, soap_slow=100, noop=1000, pool1=40, pool16=320, pg_two=400,
              history=20_000, timing_runs=1, idle_window_s=5.0, drain=5000, drain_pg=3000,
              intake=2000, intake_many=10_000)
FULL = Sizes(soap=3000, soap_slow=500, noop=5000, pool1=200, pool16=1600, pg_two=2000,
             history=100_000, timing_runs=3, idle_window_s=20.0, drain=20_000,
             drain_pg=10_000, intake=10_000, intake_many=50_000)

SLOW_SOAP_MS = 10  # milliseconds: a "realistic" fast service, for context
POOL_LATENCY_MS = 50  # milliseconds of server latency for pool_speedup_16
PG_LATENCY_MS = 20  # milliseconds of server latency for pg_two_daemon_ratio
PG_POOL = 4  # workers per daemon for pg_two_daemon_ratio


def bare_zeep(wsdl: str, count: int, text: str = "x") -> float:
    """Calls/s of a plain zeep client in a loop (its own keep-alive session)."""
    client = zeep.Client(wsdl)
    client.service.GetResponse(text=text)  # warm: connection open
    t0 = time.perf_counter()
    for _ in range(count):
        client.service.GetResponse(text=text)
    return count / (time.perf_counter() - t0)


def soap_adapter_alone(wsdl: str, count: int) -> float:
    """Calls/s of Encore's SoapAdapter (deadline, classification) without the daemon or SQL."""
    adapter = SoapAdapter({"wsdl": wsdl, "response_timeout": 5}, item_name="bench")
    adapter.start()
    try:
        t0 = time.perf_counter()
        for _ in range(count):
            adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + 5,
                                                 idempotency_key="b"))
            adapter.invoke("GetResponse", {"text": "x"})
            adapter.end_attempt()
        return count / (time.perf_counter() - t0)
    finally:
        adapter.stop()


def soap_production(url: str, wsdl: str) -> Any:
    """One SoapOperation item, ``Soap``, pool 1, against ``wsdl``."""
    return h.load(h.production_text(database=url, item="Soap",
                                    cls="operations.soap:SoapOperation",
                                    settings={"wsdl": wsdl, "response_timeout": 5}))


def soap_daemon(url: str, wsdl: str, count: int, text: str = "x") -> dict[str, Any]:
    store = h.fresh_store(url)
    try:
        prod = soap_production(url, wsdl)
        body = {"operation": "GetResponse", "args": {"text": text}}
        return h.daemon_throughput(store, prod, "Soap", body, count)
    finally:
        store.dispose()


def overhead(work: Path, urls: dict[str, str], sizes: Sizes) -> Outcome:
    """overhead_ratio: daemon (SQLite, pool 1, SoapOperation) ÷ bare zeep, same server."""
    out = Outcome()
    wsdl = urls["soap"] + "?wsdl"
    bare = bare_zeep(wsdl, sizes.soap)
    daemon = soap_daemon(h.sqlite_url(work, "soap.db"), wsdl, sizes.soap)
    out.key("overhead_ratio", "daemon ÷ bare zeep, instant SOAP server",
            daemon["msgs_per_s"] / bare,
            note=f"{daemon['msgs_per_s']:.0f} vs {bare:.0f} msg/s, n={sizes.soap}")
    out.info("bare zeep loop, instant server", bare, "msg/s")
    out.info("SoapAdapter alone (no daemon, no SQL)", soap_adapter_alone(wsdl, sizes.soap),
             "msg/s")
    out.info("daemon SOAP pool 1, instant server", daemon["msgs_per_s"], "msg/s",
             f"the producer took {daemon['enqueue_s']:.2f} s of {daemon['seconds']:.2f} s")
    # the same daemon draining a queue filled first: what the in-process producer costs
    queued = drain.drain(h.sqlite_url(work, "soap-drain.db"), sizes.soap, item="Soap",
                         production=soap_production(h.sqlite_url(work, "soap-drain.db"), wsdl),
                         body=SOAP_BODY)
    out.info("daemon ÷ bare zeep, queue filled first (no producer)", queued.msgs_per_s / bare,
             "", f"{queued.msgs_per_s:.0f} vs {bare:.0f} msg/s")
    slow_text = f"sleep:{SLOW_SOAP_MS / 1000}"
    bare_slow = bare_zeep(wsdl, sizes.soap_slow, slow_text)
    daemon_slow = soap_daemon(h.sqlite_url(work, "soap-slow.db"), wsdl, sizes.soap_slow,
                              slow_text)
    out.info(f"daemon ÷ bare zeep, server answering in {SLOW_SOAP_MS} ms",
             daemon_slow["msgs_per_s"] / bare_slow, "",
             f"{daemon_slow['msgs_per_s']:.0f} vs {bare_slow:.0f} msg/s")
    return out


def noop_rate(url: str, count: int, pool: int, history: int = 0) -> dict[str, Any]:
    store = h.fresh_store(url)
    if history:
        add_history(store, "Noop", history)
    try:
        prod = h.load(h.production_text(database=url, item="Noop",
                                        cls="bench.ops:NoopOperation", pool_size=pool))
        return h.daemon_throughput(store, prod, "Noop", NOOP_BODY, count)
    finally:
        store.dispose()


def add_history(store: Any, target: str, count: int) -> None:
    """``count`` requests of ``target`` that finished a day ago (one bulk insert)."""
    now = utcnow() - timedelta(days=1)
    rows = [{"target": target, "source": "bench", "kind": "request", "body": "{}",
             "status": "Completed", "is_error": False, "time_created": now,
             "time_processed": now, "time_completed": now, "retry_needed": False,
             "attempts": 1} for _ in range(count)]
    with store.engine.begin() as conn:
        conn.execute(insert(message_header), rows)


def noop(work: Path, sizes: Sizes, pg_url: str | None) -> Outcome:
    """noop_msgs_per_s (+ _pg): the engine's own ceiling, pool 1 (pool 4 for context)."""
    out = Outcome()
    for db, url in (("SQLite", h.sqlite_url(work, "noop.db")), ("PostgreSQL", pg_url)):
        key = "noop_msgs_per_s" if db == "SQLite" else "noop_msgs_per_s_pg"
        if url is None:
            out.key(key, "PostgreSQL not configured", None,
                    note="pass --pg-url or set ENCORE_BENCH_POSTGRES_URL")
            continue
        one = noop_rate(url, sizes.noop, 1)
        out.key(key, f"no-op operation, pool 1, {db}", one["msgs_per_s"], "msg/s",
                f"n={sizes.noop}; the producer enqueued at "
                f"{sizes.noop / one['enqueue_s']:.0f} msg/s meanwhile")
        if url.startswith("sqlite"):
            url = h.sqlite_url(work, "noop4.db")
        four = noop_rate(url, sizes.noop, 4)
        out.info(f"no-op operation, pool 4, {db}", four["msgs_per_s"], "msg/s")
        if url.startswith("sqlite"):
            url = h.sqlite_url(work, "noop-history.db")
        old = noop_rate(url, sizes.noop, 1, history=sizes.history)
        out.info(f"no-op, pool 1, {db}, {sizes.history:,} finished messages in the table",
                 old["msgs_per_s"], "msg/s", "claim_next cost grows with the item's history")
    return out


def http_rate(url: str, target_url: str, count: int, pool: int) -> dict[str, Any]:
    store = h.fresh_store(url)
    try:
        prod = h.load(h.production_text(database=url, item="Http",
                                        cls="operations.http:HttpOperation", pool_size=pool,
                                        settings={"url": target_url, "response_timeout": 10}))
        return h.daemon_throughput(store, prod, "Http", HTTP_GET, count)
    finally:
        store.dispose()


def bare_requests(target_url: str, count: int, threads: int) -> float:
    """Calls/s of plain ``requests``: ``threads`` threads, one ``Session`` each (warmed up,
    its connection open), ``count`` calls shared between them, timed from the moment they
    all start."""
    share = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]
    ready = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def loop(calls: int) -> None:
        try:
            with requests.Session() as session:
                session.get(target_url, timeout=10).raise_for_status()
                ready.wait()
                for _ in range(calls):
                    session.get(target_url, timeout=10).raise_for_status()
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
            ready.abort()

    workers = [threading.Thread(target=loop, args=(n,), daemon=True) for n in share]
    for worker in workers:
        worker.start()
    try:
        ready.wait(timeout=60)
    except threading.BrokenBarrierError:
        pass  # a thread failed: its error is raised below
    t0 = time.perf_counter()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    return count / (time.perf_counter() - t0)


def pool_speedup(work: Path, urls: dict[str, str], sizes: Sizes) -> Outcome:
    """pool_speedup_16: pool 16 ÷ pool 1 against a server with 50 ms latency (SQLite), and
    bare_requests_speedup_16: the same for plain ``requests`` threads, its peer."""
    out = Outcome()
    target = f"{urls['http']}/sleep/{POOL_LATENCY_MS}"
    one = http_rate(h.sqlite_url(work, "pool1.db"), target, sizes.pool1, 1)
    sixteen = http_rate(h.sqlite_url(work, "pool16.db"), target, sizes.pool16, 16)
    bare_one = bare_requests(target, sizes.pool1, 1)
    bare_sixteen = bare_requests(target, sizes.pool16, 16)
    speedup, bare = sixteen["msgs_per_s"] / one["msgs_per_s"], bare_sixteen / bare_one
    out.key("pool_speedup_16", f"HttpOperation, {POOL_LATENCY_MS} ms server, pool 16 ÷ pool 1",
            speedup,
            note=f"{sixteen['msgs_per_s']:.0f} vs {one['msgs_per_s']:.1f} msg/s; "
                 f"ideal {16 * 1000 / POOL_LATENCY_MS:.0f} vs {1000 / POOL_LATENCY_MS:.0f}; "
                 f"bare requests {bare:.2f} (0.9 × = {0.9 * bare:.2f})")
    out.info("pool 1", one["msgs_per_s"], "msg/s", f"n={sizes.pool1}")
    out.info("pool 16", sixteen["msgs_per_s"], "msg/s", f"n={sizes.pool16}")
    out.key("bare_requests_speedup_16", f"plain requests, {POOL_LATENCY_MS} ms server, "
            "16 threads ÷ 1", bare,
            note=f"{bare_sixteen:.0f} vs {bare_one:.1f} calls/s, one Session per thread, "
                 f"n={sizes.pool16} / {sizes.pool1}")
    return out


# -- two daemons on PostgreSQL -----------------------------------------------------------------

def pg_daemons(work: Path, pg_url: str, target_url: str, count: int,
               daemons: int) -> tuple[float, dict[str, float]]:
    """Messages/s of ``daemons`` ``encore run`` processes draining ``count`` queued
    messages: from the first claim to the last completion. The item is disabled until
    every daemon is up, so that they all start together. Returns (msgs/s, {share of the
    machine's CPU busy meanwhile, CPU ms per message of the daemons and of PostgreSQL})."""
    store = h.fresh_store(pg_url)
    try:
        text_ = h.production_text(database=pg_url, item="Http",
                                  cls="operations.http:HttpOperation", pool_size=PG_POOL,
                                  settings={"url": target_url, "response_timeout": 10})
        prod = h.load(text_)
        path = work / f"pg-{daemons}.toml"
        path.write_text(text_)
        store.set_item_enabled("Http", False, reason="bench: wait for every daemon",
                               now=utcnow())
        h.produce(store, prod, "Http", HTTP_GET, count)
        procs = [h.DaemonProcess(path, work, f"pg-{daemons}-{i}") for i in range(daemons)]
        try:
            for proc in procs:
                h.wait_started(proc)
            store.set_item_enabled("Http", True, reason=None, now=utcnow())
            cpu = h.MachineCpu()
            pg0, mine0 = h.postgres_cpu(), sum(h.process_cpu(p.pid) for p in procs)
            h.wait_finished(store, "Http", count, timeout=600)
            busy = cpu.busy()
            pg = h.postgres_cpu() - pg0
            mine = sum(h.process_cpu(p.pid) for p in procs) - mine0
        finally:
            for proc in procs:
                proc.stop()
        w = h.window(store, "Http")
        return h.rate(w.completed, w.first_processed, w.last_completed), {
            "busy": busy, "daemon_ms": mine / count * 1000, "pg_ms": pg / count * 1000}
    finally:
        store.dispose()


def pg_two_daemons(work: Path, urls: dict[str, str], sizes: Sizes,
                   pg_url: str | None) -> Outcome:
    out = Outcome()
    if pg_url is None:
        out.key("pg_two_daemon_ratio", "PostgreSQL not configured", None,
                note="pass --pg-url or set ENCORE_BENCH_POSTGRES_URL")
        return out
    target = f"{urls['http']}/sleep/{PG_LATENCY_MS}"
    one, busy_one = pg_daemons(work, pg_url, target, sizes.pg_two, 1)
    two, busy_two = pg_daemons(work, pg_url, target, sizes.pg_two, 2)
    ideal = PG_POOL * 1000 / PG_LATENCY_MS
    out.key("pg_two_daemon_ratio", f"HttpOperation {PG_LATENCY_MS} ms, pool {PG_POOL} each, "
            "2 daemons ÷ 1", two / one,
            note=f"{two:.0f} vs {one:.0f} msg/s; ideal {2 * ideal:.0f} vs {ideal:.0f}")
    for label, value, cpu in (("one daemon", one, busy_one), ("two daemons", two, busy_two)):
        out.info(label, value, "msg/s",
                 f"n={sizes.pg_two}; machine CPU {100 * cpu['busy']:.0f} % busy; CPU per "
                 f"message: daemon {cpu['daemon_ms']:.1f} ms, PostgreSQL {cpu['pg_ms']:.1f} ms")
    return out
