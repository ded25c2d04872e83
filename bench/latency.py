"""How fast Encore answers (issue 21): synchronous round trips, a router hop, a process's
sync call, the pickup of a message sent by another process, and the start of ``encore send``.

Every figure is taken as a user would meet it: a production with ``[portal]`` inside
``encore run`` (a subprocess, default ``poll_interval``), on a SQLite file (or the bench's
PostgreSQL database for the ``_pg`` keys), with three items:

- ``Echo`` (``bench.ops:EchoOperation``): ``on_message`` returns ``{"ok": true}``;
- ``Router`` (``engine.router:Router``): no rules, ``default_target = "Echo"``;
- ``Caller`` (``bench.process_ops:SyncCaller``): a process that makes N sequential
  ``send_request_sync`` calls to ``Echo`` and answers the duration of each.

The keys:

- ``sync_roundtrip_ms_p50`` / ``_p99`` (``_pg``): sequential ``POST
  /api/v1/messages/Echo?wait=5`` over one kept-alive ``http.client`` connection
  (bench/keepalive.py says why not ``requests``), each answered 200 with the message
  Completed; the client's time of each call. The same calls through a ``requests.Session``
  are shown beside (info).
- ``router_hop_ms_p50``: the same calls to ``Router`` in the same daemon, right after,
  alternated with as many direct calls to ``Echo`` (so that both see the same machine: a
  change of load between two runs would be taken for the hop); p50 of the router calls
  minus p50 of the direct calls alternated with them.
- ``process_call_ms_p50``: one request to ``Caller`` (through intake ``?wait``) whose
  process times each of its N sync calls with ``time.perf_counter``; p50 of those.
- ``pickup_ms_p50`` (``_pg``): ``engine.client.send_message`` from this process (not the
  daemon's) to the idle daemon; ``message_attempt.started_at`` of the message minus the
  UTC time just before the call (the client's commit included: its own p50 is shown
  beside). Each message is waited for, then :data:`PICKUP_GAP` s pass before the next
  send, so the daemon is idle each time.
- ``cli_send_s``: median of :data:`CLI_RUNS` whole ``encore -p prod.toml send Echo --body
  '{}'`` processes, and ``python_pass_s``, the median of as many ``python -c pass`` in the
  same run (the interpreter's own start, for scale).
"""
from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

from bench import harness as h
from bench.intake_http import _free_port
from bench.keepalive import KeepAlive
from bench.report import Outcome
from engine.client import send_message, wait_for_response
from engine.clock import as_utc, utcnow
from engine.config.production import ProductionConfig
from engine.serving.auth import new_token, token_digest
from engine.store import accounts
from engine.store.sql import SqlStore

ECHO, ROUTER, CALLER = "Echo", "Router", "Caller"
WAIT_S = 5  # the ?wait of each round trip
WARM_CALLS = 10  # round trips before each measured run (connections, caches, imports)
PICKUP_GAP = 0.1  # seconds between a message's end and the next send: an idle daemon
PICKUP_TIMEOUT = 10.0  # seconds a pickup sample may take before the scenario fails
PICKUP_LOOK = 0.005  # seconds between two looks at a pickup sample's status
START_TIMEOUT = 60.0  # seconds ``encore run`` may take until its portal answers
CLI_RUNS = 5  # whole processes timed for cli_send_s and python_pass_s


@dataclass(frozen=True)
class Sizes:
    """How many calls each figure takes (``--quick`` or full)."""

    roundtrips: int  # sync_roundtrip_ms_p50/_p99 (and _pg)
    router: int  # router_hop_ms_p50: round trips through the router (and as many direct)
    process: int  # process_call_ms_p50: sync calls inside the process
    pickups: int  # pickup_ms_p50 (and _pg)


QUICK = Sizes(roundtrips=200, router=100, process=100, pickups=30)
FULL = Sizes(roundtrips=1000, router=1000, process=1000, pickups=100)


# -- statistics ------------------------------------------------------------------------------

def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile: the smallest value with ``pct`` % of them at or below."""
    ordered = sorted(values)
    rank = max(math.ceil(pct / 100 * len(ordered)), 1)
    return ordered[rank - 1]


def _spread(values: Sequence[float]) -> str:
    return (f"n={len(values)}; p90 {percentile(values, 90):.2f}, p99 "
            f"{percentile(values, 99):.2f}, max {max(values):.2f} ms")


# -- the production inside ``encore run`` ----------------------------------------------------

def production_text(database: str, port: int) -> str:
    q = h._toml  # the harness's TOML quoting
    return "\n".join([
        "[production]", 'name = "Latency"', f"database = {q(database)}", "",
        "[portal]", 'host = "127.0.0.1"', f"port = {port}", "",
        "[[items]]", f"name = {q(ECHO)}", 'class = "bench.ops:EchoOperation"', "pool_size = 1",
        "", "[[items]]", f"name = {q(ROUTER)}", 'class = "engine.router:Router"',
        "pool_size = 1", "[items.settings]", f"default_target = {q(ECHO)}", "timeout = 30", "",
        "[[items]]", f"name = {q(CALLER)}", 'class = "bench.process_ops:SyncCaller"',
        "pool_size = 1", ""])


@dataclass
class Daemon:
    """A running ``encore run`` with its portal: the base URL, a sender token, the
    production (for ``send_message``) and a store of this process on its database."""

    proc: h.DaemonProcess
    base: str
    token: str
    production: ProductionConfig
    store: SqlStore

    def session(self) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.token}"
        return session

    def client(self) -> KeepAlive:
        return KeepAlive(self.base, self.token)


@contextmanager
def daemon(work: Path, url: str, label: str) -> Iterator[Daemon]:
    """``encore run`` of :func:`production_text` on a fresh database (PostgreSQL: wiped),
    once its portal answers; stopped on the way out."""
    store = h.fresh_store(url)
    token = new_token()
    accounts.add_token(store, "bench", "sender", token_digest(token), now=utcnow())
    port = _free_port()
    text = production_text(url, port)
    path = work / f"{label}.toml"
    path.write_text(text)
    base = f"http://127.0.0.1:{port}"
    try:
        with h.DaemonProcess(path, work, label) as proc:
            h.wait_started(proc, START_TIMEOUT)
            _wait_portal(proc, base)
            yield Daemon(proc, base, token, h.load(text), store)
    finally:
        store.dispose()


def _wait_portal(proc: h.DaemonProcess, base: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            requests.get(f"{base}/login", timeout=1)
            return
        except requests.ConnectionError:
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the portal of encore run did not answer:\n"
                                   f"{proc.output()}") from None
            time.sleep(0.05)


# -- measurements ----------------------------------------------------------------------------

Post = Callable[[str], tuple[int, Any]]  # a POST to the path: (status, the answer's JSON)


def _timed(post: Post, target: str, count: int, warm: int) -> list[float]:
    """Milliseconds of each of ``count`` sequential ``?wait`` calls to ``target`` (after
    ``warm`` untimed ones); each must answer 200 with the message Completed."""
    durations = []
    path = f"/api/v1/messages/{target}?wait={WAIT_S}"
    for i in range(warm + count):
        t0 = time.perf_counter()
        status, answer = post(path)
        elapsed = (time.perf_counter() - t0) * 1000
        _check(status, answer, target)
        if i >= warm:
            durations.append(elapsed)
    return durations


def _lean(client: KeepAlive) -> Post:
    return lambda path: client.post(path, {})


def roundtrips(d: Daemon, target: str, count: int, *, warm: int = WARM_CALLS) -> list[float]:
    """Milliseconds of each of ``count`` sequential ``POST /api/v1/messages/{target}?wait=5``
    on one kept-alive ``http.client`` connection (after ``warm`` untimed ones); each must
    answer 200 with the message Completed."""
    with d.client() as client:
        return _timed(_lean(client), target, count, warm)


def roundtrips_requests(d: Daemon, target: str, count: int) -> list[float]:
    """:func:`roundtrips` through one ``requests.Session`` (shown beside the key)."""
    with d.session() as session:
        def post(path: str) -> tuple[int, Any]:
            reply = session.post(d.base + path, json={}, timeout=WAIT_S + 30)
            return reply.status_code, reply.json()
        return _timed(post, target, count, WARM_CALLS)


def alternated(d: Daemon, count: int) -> tuple[list[float], list[float]]:
    """(milliseconds of ``count`` round trips to Echo, of ``count`` to Router), the two
    alternated call by call on one kept-alive connection, after ``WARM_CALLS`` untimed ones
    of each."""
    durations: dict[str, list[float]] = {ECHO: [], ROUTER: []}
    with d.client() as client:
        for i in range(WARM_CALLS + count):
            for target in (ECHO, ROUTER):
                (ms,) = _timed(_lean(client), target, 1, 0)
                if i >= WARM_CALLS:
                    durations[target].append(ms)
    return durations[ECHO], durations[ROUTER]


def _check(status: int, answer: Any, target: str) -> dict[str, Any]:
    if status != 200 or not isinstance(answer, dict):
        raise RuntimeError(f"intake to {target} answered {status}: {answer}")
    if answer.get("status") != "Completed":
        raise RuntimeError(f"the message to {target} ended {answer.get('status')}: "
                           f"{answer.get('error')}")
    return answer


def process_calls(d: Daemon, count: int) -> list[float]:
    """Milliseconds of each of ``count`` sync calls the ``Caller`` process makes to Echo,
    timed inside the process (a short untimed request to it first)."""
    url = f"{d.base}/api/v1/messages/{CALLER}"
    with d.session() as session:
        reply = session.post(url, params={"wait": 60}, json={"n": WARM_CALLS}, timeout=90)
        _check(reply.status_code, reply.json(), CALLER)
        # today's engine: ~50 ms a call; the wait must hold the slowest plausible run
        wait = min(300, 30 + count)
        reply = session.post(url, params={"wait": wait}, json={"n": count},
                             timeout=wait + 30)
        answer = _check(reply.status_code, reply.json(), CALLER)
    return [float(ms) for ms in answer["response"]["ms"]]


def pickups(d: Daemon, count: int) -> tuple[list[float], list[float]]:
    """(milliseconds from just before each ``send_message`` of this process to the start of
    the message's attempt in the daemon, milliseconds each ``send_message`` took)."""
    sent: list[tuple[int, datetime]] = []
    send_ms = []
    for _ in range(count):
        time.sleep(PICKUP_GAP)
        t_send, t0 = utcnow(), time.perf_counter()
        message_id = send_message(d.store, d.production, ECHO, {}, source="bench-pickup")
        send_ms.append((time.perf_counter() - t0) * 1000)
        sent.append((message_id, t_send))
        _wait_done(d.store, message_id)
    picked = []
    for message_id, t_send in sent:
        attempts = d.store.attempts(message_id)
        if not attempts:
            raise RuntimeError(f"message {message_id} finished without an attempt")
        started = as_utc(min(attempts, key=lambda a: a.attempt).started_at)
        assert started is not None
        picked.append((started - t_send).total_seconds() * 1000)
    return picked, send_ms


def client_calls(d: Daemon, count: int, *, warm: int = WARM_CALLS) -> list[float]:
    """Milliseconds of ``send_message`` + ``wait_for_response`` (engine.client) from this
    process to the daemon's no-op operation, one call after the other, each timed whole."""
    times = []
    for i in range(warm + count):
        t0 = time.perf_counter()
        message_id = send_message(d.store, d.production, ECHO, {}, source="bench-client")
        wait_for_response(d.store, message_id, ECHO, WAIT_S)
        if i >= warm:
            times.append((time.perf_counter() - t0) * 1000)
    return times


def _wait_done(store: SqlStore, message_id: int) -> None:
    deadline = time.monotonic() + PICKUP_TIMEOUT
    while True:
        row = store.get_message(message_id)
        if row is not None and row.status == "Completed":
            return
        if row is not None and row.status in ("Error", "Suspended", "Discarded", "Aborted"):
            raise RuntimeError(f"pickup message {message_id} ended {row.status}: "
                               f"{row.error_text}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"pickup message {message_id} not done after "
                               f"{PICKUP_TIMEOUT:g} s")
        time.sleep(PICKUP_LOOK)


# -- scenarios -------------------------------------------------------------------------------

def latency(work: Path, sizes: Sizes) -> Outcome:
    """The SQLite keys: sync round trip, router hop, process call, pickup."""
    out = Outcome()
    with daemon(work, h.sqlite_url(work, "latency.db"), "latency") as d:
        direct = roundtrips(d, ECHO, sizes.roundtrips)
        through_requests = roundtrips_requests(d, ECHO, sizes.roundtrips // 2)
        beside, routed = alternated(d, sizes.router)
        calls = process_calls(d, sizes.process)
        picked, send_ms = pickups(d, sizes.pickups)
        client = client_calls(d, sizes.process)
    p50 = statistics.median(direct)
    where = "encore run with [portal], SQLite"
    out.key("sync_roundtrip_ms_p50", f"intake ?wait=5 → no-op operation → 200, {where}", p50,
            "ms", _spread(direct))
    out.key("sync_roundtrip_ms_p99", "the same, p99", percentile(direct, 99), "ms")
    out.info("the same through requests.Session, p50", statistics.median(through_requests),
             "ms", f"{_spread(through_requests)}; requests' own CPU is ~0.65 ms a call")
    router_p50, beside_p50 = statistics.median(routed), statistics.median(beside)
    out.key("router_hop_ms_p50", "one Router hop: p50 through it − p50 direct, alternated",
            router_p50 - beside_p50, "ms", f"router round trip p50 {router_p50:.2f} ms, "
            f"direct p50 {beside_p50:.2f} ms beside it; router {_spread(routed)}")
    out.key("process_call_ms_p50", "send_request_sync from a process to a no-op operation",
            statistics.median(calls), "ms", f"timed inside the process; {_spread(calls)}")
    out.key("pickup_ms_p50", "send_message from another process → attempt start, idle "
            "daemon, SQLite", statistics.median(picked), "ms",
            f"{_spread(picked)}; {PICKUP_GAP * 1000:.0f} ms idle before each send")
    out.info("send_message itself (its commit), p50", statistics.median(send_ms), "ms",
             "part of pickup_ms_p50")
    out.key("client_roundtrip_ms_p50", "send_message + wait_for_response from another "
            "process to a no-op operation, idle daemon, SQLite", statistics.median(client),
            "ms", _spread(client))
    return out


def latency_pg(work: Path, sizes: Sizes, pg_url: str | None) -> Outcome:
    """The PostgreSQL keys: sync round trip and pickup on the bench's (wiped) database."""
    out = Outcome()
    if pg_url is None:
        reason = "PostgreSQL not configured: pass --pg-url or set ENCORE_BENCH_POSTGRES_URL"
        print(f"[bench] sync_roundtrip_ms_p50_pg and pickup_ms_p50_pg are null: {reason}",
              file=sys.stderr, flush=True)
        for key in ("sync_roundtrip_ms_p50_pg", "pickup_ms_p50_pg"):
            out.key(key, "PostgreSQL not configured", None, note=reason)
        return out
    with daemon(work, pg_url, "latency-pg") as d:
        direct = roundtrips(d, ECHO, sizes.roundtrips)
        through_requests = roundtrips_requests(d, ECHO, sizes.roundtrips // 2)
        picked, send_ms = pickups(d, sizes.pickups)
    out.key("sync_roundtrip_ms_p50_pg", "intake ?wait=5 → no-op operation → 200, PostgreSQL",
            statistics.median(direct), "ms", _spread(direct))
    out.info("the same through requests.Session, p50, PostgreSQL",
             statistics.median(through_requests), "ms", _spread(through_requests))
    out.key("pickup_ms_p50_pg", "send_message from another process → attempt start, idle "
            "daemon, PostgreSQL", statistics.median(picked), "ms",
            f"{_spread(picked)}; {PICKUP_GAP * 1000:.0f} ms idle before each send")
    out.info("send_message itself (its commit), p50, PostgreSQL", statistics.median(send_ms),
             "ms", "part of pickup_ms_p50_pg")
    return out


def encore_command() -> list[str]:
    """The venv's ``encore`` script beside this interpreter, else ``python -m engine.cli``."""
    script = Path(sys.executable).parent / "encore"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "engine.cli"]


def _timed_run(argv: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=h.cli_env(), capture_output=True, text=True,
                          check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return elapsed


def cli(work: Path, runs: int = CLI_RUNS) -> Outcome:
    """cli_send_s and python_pass_s: medians of ``runs`` whole processes each, alternated
    (after one untimed run of each, so bytecode caches are written)."""
    out = Outcome()
    url = h.sqlite_url(work, "cli.db")
    h.fresh_store(url).dispose()
    path = work / "cli.toml"
    path.write_text(h.production_text(database=url, item=ECHO, cls="bench.ops:EchoOperation",
                                      poll_interval=None))
    send = [*encore_command(), "-p", str(path), "send", ECHO, "--body", "{}"]
    bare = [sys.executable, "-c", "pass"]
    _timed_run(send, work)
    _timed_run(bare, work)
    sends, passes = [], []
    for _ in range(runs):
        sends.append(_timed_run(send, work))
        passes.append(_timed_run(bare, work))
    out.key("cli_send_s", "a whole `encore send` process, median", statistics.median(sends), "s",
            f"n={runs}, {Path(send[0]).name} …, SQLite; min {min(sends):.3f}, max "
            f"{max(sends):.3f} s")
    out.key("python_pass_s", "a whole `python -c pass`, median (same run)",
            statistics.median(passes), "s", f"n={runs}; the interpreter's own start")
    return out
