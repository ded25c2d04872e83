"""Limit scenarios: timing accuracy of the seed timeline, the cost of 10,000 parked
messages, and the true deadline against a trickling server."""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import requests
from sqlalchemy import insert, select

from adapters.base import AttemptContext
from adapters.http import HttpAdapter
from bench import harness as h
from bench.report import Outcome
from engine.client import send_message
from engine.clock import as_utc, utcnow
from engine.errors import ResponseTimeout
from engine.store.models import event_log, message_attempt, message_header
from engine.store.sql import SqlStore

# The seed timeline ÷10 (docs/retries.md): attempts at 0, 1, 2, 3 s, give-up at 3.7 s.
SEED = {"response_timeout": 0.7, "retry_interval": 1.0, "failure_timeout": 3.0}
SEED_SERVER_DELAY = 0.8  # seconds
SEED_STARTS = (0.0, 1.0, 2.0, 3.0)  # seconds after the first attempt
SEED_GIVE_UP = 3.7  # seconds after the first attempt
PARKED = 10_000  # messages
PARKED_POOL = 16  # workers of the item for parked_10k_idle_cpu_pool16
PARK_FOR = timedelta(days=1)  # how far in the future they are parked
SETTLE_S = 3.0  # seconds after start before the daemon is measured
DEADLINE_S = 1.0  # response_timeout against the trickling server


def timing(work: Path, urls: dict[str, str], runs: int) -> Outcome:
    """timing_max_dev_ms: the largest deviation of an attempt start or the give-up from the
    seed schedule, read from message_attempt / message_header."""
    out = Outcome()
    url = h.sqlite_url(work, "timing.db")
    store = h.fresh_store(url)
    prod = h.load(h.production_text(database=url, item="Seed",
                                    cls="operations.soap:SoapOperation",
                                    settings={"wsdl": urls["soap"] + "?wsdl", **SEED}))
    slow = {"operation": "GetResponse", "args": {"text": f"sleep:{SEED_SERVER_DELAY}"}}
    worst, shape_ok = 0.0, True
    try:
        with h.running_daemon(prod, store):
            h.warm_up(store, prod, "Seed", {"operation": "GetResponse", "args": {"text": "x"}})
            for run in range(runs):
                message_id = send_message(store, prod, "Seed", slow, source="bench")
                h.wait_finished(store, "Seed", run + 2, timeout=30)
                dev, ok = _deviation(store, message_id)
                worst, shape_ok = max(worst, dev), shape_ok and ok
    finally:
        store.dispose()
    out.key("timing_max_dev_ms", "seed timeline ÷10 through the daemon", worst * 1000, "ms",
            f"{runs} run(s); 4 attempts, Error, 2 Error events: {'yes' if shape_ok else 'NO'}")
    return out


def _deviation(store: SqlStore, message_id: int) -> tuple[float, bool]:
    a, e = message_attempt.c, event_log.c
    with store.engine.connect() as conn:
        starts = [as_utc(t) for t in conn.execute(
            select(a.started_at).where(a.message_id == message_id).order_by(a.attempt)).scalars()]
        header = conn.execute(select(message_header.c.status, message_header.c.time_completed)
                              .where(message_header.c.id == message_id)).one()
        errors = len(conn.execute(select(e.id).where(e.message_id == message_id,
                                                     e.type == "Error")).all())
    first = starts[0]
    offsets = [(s - first).total_seconds() for s in starts]
    devs = [abs(o - want) for o, want in zip(offsets, SEED_STARTS)]
    devs.append(abs((as_utc(header.time_completed) - first).total_seconds() - SEED_GIVE_UP))
    ok = len(starts) == len(SEED_STARTS) and header.status == "Error" and errors == 2
    return max(devs), ok


# -- 10,000 parked messages -------------------------------------------------------------------

def park(store: SqlStore, target: str, count: int) -> None:
    """``count`` requests of ``target`` in the state a parked retry leaves them in —
    Queued, retry needed, one attempt made, next attempt a day away — inserted in one
    statement (10,000 separate transactions would only measure the intake)."""
    now = utcnow()
    rows = [{"target": target, "source": "bench", "kind": "request",
             "body_class": "engine.message:JsonMessage", "body": '{"n":1}', "status": "Queued",
             "is_error": False, "time_created": now, "time_processed": now,
             "retry_needed": True, "attempts": 1, "first_attempt_at": now,
             "next_attempt_at": now + PARK_FOR} for _ in range(count)]
    with store.engine.begin() as conn:
        conn.execute(insert(message_header), rows)


@dataclass(frozen=True)
class Parked:
    """What ``encore run`` holding 10,000 parked messages used once settled."""

    rss_kb: int
    hwm_kb: int
    idle_cpu: float  # share of one core over the idle window
    still_parked: int
    alive: bool


def parked_daemon(work: Path, idle_window: float, pool: int = 1) -> Parked:
    """``encore run`` holding ``PARKED`` parked messages of a requeue-mode item with
    ``pool`` workers, measured after it settles."""
    url = h.sqlite_url(work, f"parked-{pool}.db")
    store = h.fresh_store(url)
    park(store, "Parked", PARKED)
    store.dispose()
    path = work / f"parked-{pool}.toml"
    path.write_text(h.production_text(
        database=url, item="Parked", cls="operations.http:HttpOperation", poll_interval=None,
        pool_size=pool, settings={"url": "http://127.0.0.1:9/", "retry_mode": "requeue",
                                  "failure_timeout": -1}))
    with h.DaemonProcess(path, work, f"parked-{pool}") as proc:
        h.wait_started(proc)
        time.sleep(SETTLE_S)
        rss, hwm = _status_kb(proc.pid, "VmRSS"), _status_kb(proc.pid, "VmHWM")
        cpu0, t0 = _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(idle_window)
        share = (_cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
        alive = proc.alive()
    store = SqlStore(url)
    still_parked = h.queued_count(store, "Parked")
    store.dispose()
    return Parked(rss_kb=rss, hwm_kb=hwm, idle_cpu=share, still_parked=still_parked,
                  alive=alive)


def _idle_note(p: Parked, idle_window: float) -> str:
    return (f"over {idle_window:g} s; default poll_interval 0.5 s; {p.still_parked:,} still "
            "parked" + ("" if p.alive else "; DAEMON EXITED"))


def parked(work: Path, idle_window: float) -> Outcome:
    """parked_10k_rss_mb / parked_10k_idle_cpu: ``encore run`` holding 10,000 parked
    messages of a requeue-mode item, measured after it settles."""
    out = Outcome()
    p = parked_daemon(work, idle_window)
    out.key("parked_10k_rss_mb", "encore run, 10,000 parked (requeue)", p.rss_kb / 1024, "MB",
            f"peak {p.hwm_kb / 1024:.0f} MB")
    out.key("parked_10k_idle_cpu", "CPU share while nothing is due", p.idle_cpu, "",
            _idle_note(p, idle_window))
    return out


def parked_pool16(work: Path, idle_window: float) -> Outcome:
    """parked_10k_idle_cpu_pool16: the same with ``pool_size = 16`` (16 idle workers)."""
    out = Outcome()
    p = parked_daemon(work, idle_window, pool=PARKED_POOL)
    out.key("parked_10k_idle_cpu_pool16", f"CPU share while nothing is due, pool {PARKED_POOL}",
            p.idle_cpu, "", _idle_note(p, idle_window))
    out.info(f"encore run, 10,000 parked, pool {PARKED_POOL}: RSS", p.rss_kb / 1024, "MB",
             f"peak {p.hwm_kb / 1024:.0f} MB")
    return out


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _cpu_seconds(pid: int) -> float:
    return h.process_cpu(pid)


# -- the true deadline ------------------------------------------------------------------------

def deadline(urls: dict[str, str]) -> Outcome:
    """deadline_vs_requests_s: one attempt against a server that trickles its body."""
    out = Outcome()
    adapter = HttpAdapter({"url": urls["trickle"] + "/", "response_timeout": DEADLINE_S},
                          item_name="bench")
    adapter.start()
    t0 = time.monotonic()
    adapter.begin_attempt(AttemptContext(deadline=t0 + DEADLINE_S, idempotency_key="b"))
    try:
        adapter.send("GET", "")
        outcome = "answered (deadline NOT enforced)"
    except ResponseTimeout:
        outcome = "ResponseTimeout"
    finally:
        adapter.end_attempt()
    encore = time.monotonic() - t0
    adapter.stop()
    t0 = time.monotonic()
    _ = requests.get(urls["trickle"] + "/", timeout=DEADLINE_S).content  # the whole body
    plain = time.monotonic() - t0
    out.key("deadline_vs_requests_s", "trickling server, timeout 1 s: Encore / requests",
            [round(encore, 3), round(plain, 3)], "s", f"Encore: {outcome}")
    return out
