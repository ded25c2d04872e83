"""Issue 27: more workers must never mean fewer messages.

- ``noop_pool4_ratio`` (+ ``_pg``): bench/drain.py's no-op drain (a queue filled first, then
  drained by an in-process daemon) with ``pool_size = 4`` ÷ the same with ``pool_size = 1``,
  same database kind, same run;
- ``pool4_fast_ratio``: a loopback HTTP service answering in ``FAST_MS`` ms
  (bench/servers.py's ``/sleep/MS``) drained by an ``operations.http:HttpOperation`` item
  with ``pool_size = 4`` (queue filled first, SQLite) ÷ bare ``requests`` with 4 threads,
  one Session each, on the same server, the same number of requests, same run;
- ``dramatiq_noop_pool4_ratio``: Encore's ``pool_size = 4`` no-op drain (SQLite) ÷ dramatiq
  with 4 worker threads on RabbitMQ draining as many no-op messages enqueued first
  (bench/dramatiq_peer.py).

Each key's two sides are run in alternation, several pairs (each drain on a fresh database;
``rounds`` for the pool 4 ÷ pool 1 keys, ``peer_rounds`` for the others), and the best
figure of each side is kept: a run slowed by other work on the machine tells nothing of
either side.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from bench import drain as d
from bench import dramatiq_peer
from bench import harness as h
from bench.report import Outcome
from bench.throughput import HTTP_GET, bare_requests

FAST_MS = 2  # milliseconds the fast loopback service takes to answer
POOL = 4


@dataclass(frozen=True)
class PoolSizes:
    noop: int  # messages per no-op drain, SQLite
    noop_pg: int  # the same on PostgreSQL
    rounds: int  # alternated (pool 1, pool 4) pairs per database
    peer_rounds: int  # alternated (Encore, peer) pairs for the bare-requests and dramatiq keys
    fast: int  # requests per side of pool4_fast_ratio
    dramatiq: int  # messages per side of dramatiq_noop_pool4_ratio


# --quick: the three scenarios take about 40 s on two cores shared with other work
QUICK = PoolSizes(noop=3000, noop_pg=3000, rounds=3, peer_rounds=2, fast=800, dramatiq=2000)
FULL = PoolSizes(noop=20_000, noop_pg=10_000, rounds=3, peer_rounds=3, fast=5000,
                 dramatiq=10_000)


def _rounds(n: int, what: str) -> str:
    return f"best of {n} alternated {what} each" if n > 1 else f"one {what[:-1]} each"


def _best(runs: list[d.Drain]) -> d.Drain:
    return max(runs, key=lambda r: r.msgs_per_s)


def _figures(runs: list[d.Drain]) -> str:
    return ", ".join(f"{r.msgs_per_s:,.0f}" for r in runs)


def _failed(runs: list[d.Drain]) -> str:
    bad = sum(r.not_completed for r in runs)
    return f"; {bad} NOT Completed" if bad else ""


def noop_pool4(work: Path, sizes: PoolSizes, pg_url: str | None) -> Outcome:
    """noop_pool4_ratio and noop_pool4_ratio_pg."""
    out = Outcome()
    for db, key, count in (("SQLite", "noop_pool4_ratio", sizes.noop),
                           ("PostgreSQL", "noop_pool4_ratio_pg", sizes.noop_pg)):
        if db == "PostgreSQL" and pg_url is None:
            print(f"[bench] {key} is null: PostgreSQL not configured (pass --pg-url or set "
                  "ENCORE_BENCH_POSTGRES_URL)", file=sys.stderr, flush=True)
            out.key(key, "PostgreSQL not configured", None,
                    note="pass --pg-url or set ENCORE_BENCH_POSTGRES_URL")
            continue
        runs: dict[int, list[d.Drain]] = {1: [], POOL: []}
        for i in range(sizes.rounds):
            for pool in (1, POOL):
                url = (h.sqlite_url(work, f"pool4-{pool}-{i}.db") if db == "SQLite"
                       else pg_url)
                runs[pool].append(d.drain(url, count, pool))
        one, four = _best(runs[1]), _best(runs[POOL])
        out.key(key, f"no-op drain, pool {POOL} ÷ pool 1, {db}",
                four.msgs_per_s / one.msgs_per_s,
                note=f"{_rounds(sizes.rounds, 'drains')}, n={count:,} queued first")
        for pool in (1, POOL):
            out.info(f"no-op drain, pool {pool}, {db}", _best(runs[pool]).msgs_per_s, "msg/s",
                     f"runs: {_figures(runs[pool])} msg/s; CPU "
                     f"{_best(runs[pool]).cpu_ms_per_msg:.3f} ms/msg{_failed(runs[pool])}")
    return out


def http_drain(work: Path, target_url: str, count: int, pool: int, name: str) -> d.Drain:
    """An HttpOperation item against ``target_url`` draining ``count`` GETs queued first."""
    url = h.sqlite_url(work, name)
    prod = h.load(h.production_text(database=url, item="Http",
                                    cls="operations.http:HttpOperation", pool_size=pool,
                                    settings={"url": target_url, "response_timeout": 10}))
    return d.drain(url, count, pool, production=prod, item="Http", body=HTTP_GET)


def pool4_fast(work: Path, urls: dict[str, str], sizes: PoolSizes) -> Outcome:
    """pool4_fast_ratio: HttpOperation pool 4 ÷ bare requests with 4 threads, 2 ms server;
    ``peer_rounds`` alternated pairs, the best of each side kept."""
    out = Outcome()
    target = f"{urls['http']}/sleep/{FAST_MS}"
    bares: list[float] = []
    runs: list[d.Drain] = []
    for i in range(sizes.peer_rounds):
        bares.append(bare_requests(target, sizes.fast, POOL))
        runs.append(http_drain(work, target, sizes.fast, POOL, f"pool4-fast-{i}.db"))
    bare, encore = max(bares), _best(runs)
    ideal = POOL * 1000 / FAST_MS
    out.key("pool4_fast_ratio", f"HttpOperation, {FAST_MS} ms server, pool {POOL} ÷ bare "
            f"requests ×{POOL} threads", encore.msgs_per_s / bare,
            note=f"{encore.msgs_per_s:,.0f} vs {bare:,.0f} msg/s, "
                 f"{_rounds(sizes.peer_rounds, 'runs')}, n={sizes.fast:,}; ideal {ideal:,.0f}"
                 + _failed(runs))
    out.info(f"HttpOperation pool {POOL}, {FAST_MS} ms server, queue filled first",
             encore.msgs_per_s, "msg/s", f"runs: {_figures(runs)} msg/s; CPU "
             f"{encore.cpu_ms_per_msg:.3f} ms/msg (bench process)")
    out.info(f"bare requests, {POOL} threads, one Session each", bare, "calls/s",
             "runs: " + ", ".join(f"{b:,.0f}" for b in bares) + " calls/s")
    return out


def dramatiq(work: Path, sizes: PoolSizes) -> Outcome:
    """dramatiq_noop_pool4_ratio: Encore pool 4 no-op drain (SQLite) ÷ dramatiq ×4 threads;
    ``peer_rounds`` alternated pairs, the best of each side kept."""
    out = Outcome()
    key = "dramatiq_noop_pool4_ratio"
    why_not = dramatiq_peer.unavailable()
    peers: list[dramatiq_peer.DramatiqDrain] = []
    runs: list[d.Drain] = []
    if why_not is None:
        try:
            for i in range(sizes.peer_rounds):
                peers.append(dramatiq_peer.drain(work, sizes.dramatiq, POOL))
                runs.append(d.drain(h.sqlite_url(work, f"dramatiq-encore-{i}.db"),
                                    sizes.dramatiq, POOL))
        except Exception as exc:  # an optional peer: its key goes null
            why_not = f"the dramatiq peer failed: {type(exc).__name__}: {exc}"
    if why_not is not None:
        print(f"[bench] {key} is null: {why_not}", file=sys.stderr, flush=True)
        out.key(key, "dramatiq not available", None, note=why_not)
        return out
    peer, encore = max(peers, key=lambda p: p.msgs_per_s), _best(runs)
    out.key(key, f"Encore no-op drain pool {POOL} (SQLite) ÷ dramatiq {POOL} threads "
            "(RabbitMQ)", encore.msgs_per_s / peer.msgs_per_s,
            note=f"{encore.msgs_per_s:,.0f} vs {peer.msgs_per_s:,.0f} msg/s, "
                 f"{_rounds(sizes.peer_rounds, 'drains')}, n={sizes.dramatiq:,}"
                 + _failed(runs))
    out.info(f"Encore no-op drain, pool {POOL}, SQLite", encore.msgs_per_s, "msg/s",
             f"runs: {_figures(runs)} msg/s")
    out.info(f"dramatiq {peer.version}, 1 process × {POOL} threads, RabbitMQ", peer.msgs_per_s,
             "msg/s", "runs: " + ", ".join(f"{p.msgs_per_s:,.0f}" for p in peers)
             + f" msg/s; first start → last end {peer.seconds:.2f} s; enqueued first at "
             f"{peer.enqueue_msgs_per_s:,.0f} msg/s")
    return out
