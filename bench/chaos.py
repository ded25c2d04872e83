"""Encore's fault campaign (issue 22 point 7): faults a seed chooses, and a checker that
proves nothing the engine promises was broken by them.

    python bench/chaos.py [--rounds N] [--seed S] [--pg-url URL | --pg-cluster | --no-pg]
                          [--no-sqlite] [--rate R] [--json]

Starts 3 daemons (``encore run``) on PostgreSQL and 1 on SQLite, each with an idempotent
item (``Idem``), a non-idempotent one (``Once``) and a FIFO one (``Fifo``, pool_size 1), all
calling a loopback HTTP server that records every request it receives
(bench/chaos_server.py) — and, for the faults alone, a SOAP item, an inbound SoapService
and a stall item of its own; each daemon runs under libfaketime where it is installed, so
that its wall clock can be stepped (bench/chaos_clock.py); every daemon reaches PostgreSQL
through TCP proxies of its own that can cut, blackhole and delay its connections
(bench/chaos_proxy.py); a producer per database sends messages through Encore's client API
all along. PostgreSQL is the database
of ``--pg-url`` when one is given, which it wipes (restarts seen through the proxies; no
failover); else a primary and a synchronous standby of the campaign's own when the
server's binaries are installed (``--pg-cluster``: real restarts and failovers); else the
database of ``$ENCORE_TEST_POSTGRES_URL``.

Each round injects one fault drawn by the seed (bench/chaos_faults.py; every kind once per
pass through a shuffled deck), then lets the daemons settle. After the last round the
producers go on for ``--cooldown`` seconds (every live daemon must deliver in them), then
stop, and the queues drain; then bench/chaos_checker.py judges each database and the table
is printed, with the claims each daemon says it lost and the spells in which its heartbeat
was older than the lease (bench/chaos_lag.py). The exit status is 1 on any violation. The
same seed draws the same faults, targets and durations in the same order (their timing
against the traffic is real time, not replayed).
RELIABILITY.md has a long run and what each guarantee costs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `python bench/chaos.py`: the checkout's engine first

from bench.chaos_checker import (  # noqa: E402
    ROLES,
    Evidence,
    FaultWindow,
    Violation,
    check,
    counts,
)
from bench.chaos_clock import faketime_library  # noqa: E402
from bench.chaos_daemons import FAULT_ITEMS, ITEMS, LEASE_SECONDS, Daemon  # noqa: E402
from bench.chaos_disk import SqliteDisk  # noqa: E402
from bench.chaos_faults import FAULT_ACTIONS, FAULTS  # noqa: E402
from bench.chaos_lag import HeartbeatWatch  # noqa: E402
from bench.chaos_pg import ClusterPg, ExternalPg, PgBackend  # noqa: E402
from bench.chaos_producer import Producer  # noqa: E402
from bench.chaos_proxy import FaultProxy  # noqa: E402
from bench.chaos_report import table  # noqa: E402
from bench.chaos_server import CountingServer  # noqa: E402
from engine.store.sql import SqlStore  # noqa: E402
from engine.store.statuses import ENDED_STATUSES  # noqa: E402

PG_ENV = "ENCORE_TEST_POSTGRES_URL"
DRAIN_TIMEOUT = 120.0  # seconds the queues may take to drain once the faults stop
# seconds after its fault a daemon may still find a claim lost: its next write (an answer
# 2.5 s late, a retry, a heartbeat) tells it, on a loaded machine
LOSS_GRACE = 4 * LEASE_SECONDS + 2.0


@dataclass
class Database:
    """One database of the campaign, its daemons, proxies and producer."""

    name: str  # "postgresql" | "sqlite"
    url: str  # direct, for the checker
    daemons: list[Daemon]
    proxies: dict[str, list[FaultProxy]] = field(default_factory=dict)  # client → per node
    producer: Producer | None = None


@dataclass
class Campaign:
    args: argparse.Namespace
    rng: random.Random
    work: Path
    server: CountingServer
    databases: list[Database] = field(default_factory=list)
    pg: PgBackend | None = None
    disk: SqliteDisk | None = None
    faults: Counter[str] = field(default_factory=Counter)
    log: list[str] = field(default_factory=list)
    deck: list[str] = field(default_factory=list)  # the faults still to draw in this pass
    windows: list[FaultWindow] = field(default_factory=list)  # whom each fault touched, when
    # hostile XML calls: (database, daemon, slowest portal answer, (status, seconds) of the
    # envelope under the limit, of the one over it)
    xml_calls: list[tuple[str, str, float, tuple[int, float], tuple[int, float]]] = field(
        default_factory=list)
    _touched: tuple[set[str], float] | None = None
    watches: dict[str, HeartbeatWatch] = field(default_factory=dict)  # late heartbeats

    # -- who can take which fault --------------------------------------------------------
    def daemons(self, database: str | None = None) -> list[Daemon]:
        return [d for db in self.databases if database in (None, db.name) for d in db.daemons]

    def available(self) -> list[str]:
        pg = any(db.name == "postgresql" for db in self.databases)
        out = ["kill9", "sigstop", "portal_flood", "live_stall", "hostile_xml"]
        if faketime_library() is not None:
            out.append("clock_step")
        if pg:
            out += ["db_restart", "cut", "blackhole", "delay"]
            if self.pg is not None and self.pg.can_failover:
                out.append("failover")
        if self.disk is not None:
            out.append("disk_full")
        chosen = self.args.faults.split(",") if self.args.faults else FAULTS
        return [f for f in FAULTS if f in out and f in chosen]

    def database(self, name: str) -> Database:
        return next(db for db in self.databases if db.name == name)

    def database_of(self, daemon: Daemon) -> Database:
        return next(db for db in self.databases if daemon in db.daemons)

    def touch(self, *daemons: Daemon, offset: float = 0.0) -> None:
        """The fault of this round touches ``daemons`` (its window: :meth:`round`);
        ``offset``: seconds their wall clock is stepped by."""
        names = {d.name for d in daemons}
        if self._touched is not None:
            names |= self._touched[0]
        self._touched = (names, offset)

    # -- the rounds ----------------------------------------------------------------------
    def draw(self) -> str:
        """The next fault: every available kind once per pass, in an order the seed
        shuffles (so that a few rounds see every kind, and a long run each as often)."""
        if not self.deck:
            self.deck = self.available()
            self.rng.shuffle(self.deck)
        return self.deck.pop()

    def round(self, number: int) -> None:
        kind = self.draw()
        started, wall = time.monotonic(), time.time()
        self._touched = None
        try:
            detail = FAULT_ACTIONS[kind](self)
        finally:
            if self._touched is not None:
                names, offset = self._touched
                self.windows.append(FaultWindow(frozenset(names), wall, time.time(), offset))
        self.faults[kind] += 1
        line = (f"round {number:4d} {time.strftime('%H:%M:%S', time.localtime(wall))}: "
                f"{kind:12s} {detail} ({time.monotonic() - started:.1f} s)")
        self.log.append(line)
        if not self.args.json:
            print(line, flush=True)
        time.sleep(self.rng.uniform(0.5, 1.5))  # settle


# -- setting up ----------------------------------------------------------------------------
def _pg_backend(args: argparse.Namespace) -> PgBackend | None:
    """--pg-url; else --pg-cluster; else a cluster of our own when the server's binaries
    are installed; else $ENCORE_TEST_POSTGRES_URL; else none."""
    if args.no_pg:
        return None
    if args.pg_url:
        return ExternalPg(args.pg_url)
    from tests.integration.pg_cluster import find_bindir
    if args.pg_cluster or find_bindir() is not None:
        return ClusterPg()
    if os.environ.get(PG_ENV):
        return ExternalPg(os.environ[PG_ENV])
    print(f"no PostgreSQL: give --pg-url or ${PG_ENV}, or install the server's binaries; "
          "running on SQLite only", file=sys.stderr)
    return None


def _setup_pg(c: Campaign, backend: PgBackend) -> None:
    direct = backend.direct_url()
    store = SqlStore(direct)
    store.upgrade()
    store.dispose()
    db = Database("postgresql", direct, [])
    for n in range(1, c.args.daemons + 1):
        name = f"pg-{n}"
        db.proxies[name] = [FaultProxy(node, name) for node in backend.nodes]
        db.daemons.append(Daemon(name, c.work / name, backend.client_url(db.proxies[name]),
                                 c.server.url))
    db.proxies["producer"] = [FaultProxy(node, "producer") for node in backend.nodes]
    db.producer = Producer("pg", backend.client_url(db.proxies["producer"]),
                           db.daemons[0].production, rate=c.args.rate)
    c.databases.append(db)


def _setup_sqlite(c: Campaign) -> None:
    c.disk = SqliteDisk(c.work / "lite-disk")
    url = f"sqlite:///{c.disk.directory / 'chaos.db'}"
    store = SqlStore(url)
    store.upgrade()
    store.dispose()
    daemon = Daemon("lite", c.work / "lite", url, c.server.url)
    db = Database("sqlite", url, [daemon])
    db.producer = Producer("lite", url, daemon.production, rate=c.args.rate)
    c.databases.append(db)


# -- the end -------------------------------------------------------------------------------
def _unended(url: str) -> int:
    store = SqlStore(url)
    try:
        with store.engine.connect() as conn:
            from sqlalchemy import text
            placeholders = ", ".join(f"'{s}'" for s in ENDED_STATUSES)
            return int(conn.execute(text(
                "SELECT count(*) FROM message_header WHERE kind = 'request' "
                f"AND status NOT IN ({placeholders})")).scalar_one())
    finally:
        store.dispose()


def _drain(c: Campaign) -> float:
    """Seconds until every queue is empty (or DRAIN_TIMEOUT)."""
    started = time.monotonic()
    while time.monotonic() - started < DRAIN_TIMEOUT:
        try:
            if all(_unended(db.url) == 0 for db in c.databases):
                break
        except Exception:  # a database still coming back
            pass
        time.sleep(0.5)
    return time.monotonic() - started


def _judge(c: Campaign, db: Database, roles: dict[str, str],
           calm: int) -> tuple[list[Violation], dict[str, Any]]:
    assert db.producer is not None
    prefix = f"{db.producer.prefix}:"
    arrivals = [a for a in c.server.snapshot() if a.tag.startswith(prefix)]
    violations = [Violation("stuck", None, f"daemon {d.name} exited by itself (status "
                            f"{d.proc.returncode if d.proc else '?'}); see {d.log}")
                  for d in db.daemons if not d.alive()]
    violations += [Violation("xml_stall", None, f"daemon {name}: its portal took {worst:.1f} s "
                             f"to answer while hostile XML was posted (in: {under[0]} in "
                             f"{under[1]:.1f} s under the limit, {over[0]} in {over[1]:.1f} s "
                             "over it)")
                   for where, name, worst, under, over in c.xml_calls
                   if where == db.name and worst > LEASE_SECONDS]
    losses = [loss for d in db.daemons for loss in d.claim_losses()]
    store = SqlStore(db.url)
    try:
        violations += check(store.engine, Evidence(
            roles=roles, accepted=db.producer.accepted, arrivals=arrivals,
            live_pids=[d.pid for d in db.daemons if d.alive()],
            lease_seconds=3 * LEASE_SECONDS, senders=[d.name for d in db.daemons if d.alive()],
            since_seq=calm, claim_losses=losses, loss_grace=LOSS_GRACE,
            faults=c.windows + (_late_windows(c.watches[db.name])
                                if c.args.excuse_late_heartbeats else [])))
        with store.engine.connect() as conn:
            from sqlalchemy import text
            statuses = dict(conn.execute(text(
                "SELECT status, count(*) FROM message_header WHERE kind = 'request' "
                "GROUP BY status")).all())
    finally:
        store.dispose()
    after = Counter(a.sender for a in arrivals if a.seq >= calm)
    # what outcome-unknown handling costs an idempotent item: messages processed again
    processed = Counter(a.tag for a in arrivals if a.processed)
    resent = sum(1 for tag, n in processed.items()
                 if n > 1 and roles.get(tag.split(":")[1]) != "once")
    figures = {"messages": sum(statuses.values()), "accepted": len(db.producer.accepted),
               "refused": db.producer.refused, "requests": len(arrivals),
               "processed_again": resent,
               "requests_after_faults": {d.name: after.get(d.name, 0) for d in db.daemons},
               "claims_lost": dict(Counter(loss.daemon for loss in losses)),
               "late_heartbeats": c.watches[db.name].counts(),
               "statuses": {k: int(v) for k, v in sorted(statuses.items())}}
    return violations, figures


def _pids(db: Database) -> Callable[[], dict[int, str]]:
    return lambda: {d.pid: d.name for d in db.daemons if d.proc is not None}


def _late_windows(watch: HeartbeatWatch) -> list[FaultWindow]:
    """A daemon whose heartbeat was older than the lease may lose its claims then."""
    return [FaultWindow(frozenset({name}), start, end)
            for name, spells in watch.late.items() for start, end in spells]


def _roles(args: argparse.Namespace) -> dict[str, str]:
    roles = {**ITEMS, **FAULT_ITEMS}
    for spec in args.misjudge or ():
        item, _, role = spec.partition("=")
        if item not in roles or role not in ROLES:
            raise SystemExit(f"--misjudge {spec!r}: expected ITEM=ROLE with ITEM one of "
                             f"{sorted(roles)} and ROLE one of {list(ROLES)}")
        roles[item] = role
    return roles


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(args: argparse.Namespace) -> dict[str, Any]:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    work = Path(tempfile.mkdtemp(prefix="encore-chaos-"))
    load_start, started = _load(), time.monotonic()
    roles = _roles(args)
    with CountingServer() as server:
        c = Campaign(args, random.Random(seed), work, server)
        try:
            c.pg = _pg_backend(args)
            if c.pg is not None:
                _setup_pg(c, c.pg)
            if not args.no_sqlite:
                _setup_sqlite(c)
            if not c.databases:
                raise SystemExit("nothing to run on: both --no-pg and --no-sqlite")
            for d in c.daemons():
                d.start()
            for d in c.daemons():
                d.wait_started()
            for db in c.databases:
                c.watches[db.name] = HeartbeatWatch(db.url, _pids(db), LEASE_SECONDS)
                c.watches[db.name].start()
            for db in c.databases:
                assert db.producer is not None
                db.producer.start()
            time.sleep(args.warmup)
            for number in range(1, args.rounds + 1):
                c.round(number)
            calm = len(server.snapshot())  # the faults have stopped: every daemon must work
            time.sleep(args.cooldown)
            for db in c.databases:
                assert db.producer is not None
                db.producer.stop()
            drained = _drain(c)
            results = {db.name: _judge(c, db, roles, calm) for db in c.databases}
        finally:
            for watch in c.watches.values():
                watch.stop()
            _teardown(c, keep=args.keep)
    violations = [v for found, _ in results.values() for v in found]
    report = {
        "seed": seed, "rounds": args.rounds, "seconds": time.monotonic() - started,
        "drain_seconds": drained, "load_start": load_start, "load_end": _load(),
        "postgresql": c.pg.kind if c.pg else "none",
        "disk_full": c.disk.mode if c.disk else "none",
        "faults": dict(sorted(c.faults.items())),
        "databases": {name: {**figures, "violations": counts(found)}
                      for name, (found, figures) in results.items()},
        "violations": len(violations),
        "examples": [f"[{name}] {v}" for name, (found, _) in results.items()
                     for v in found][:30],
        "work": str(work) if args.keep else None}
    return report


def _teardown(c: Campaign, *, keep: bool) -> None:
    for db in c.databases:
        if db.producer is not None:
            db.producer.stop()
        for proxies in db.proxies.values():
            for proxy in proxies:
                proxy.heal()
    for d in c.daemons():
        d.terminate(timeout=20)
    for db in c.databases:
        for proxies in db.proxies.values():
            for proxy in proxies:
                proxy.close()
    if c.pg is not None:
        c.pg.close()
    if c.disk is not None:
        if keep:  # the tmpfs goes with the mount: keep a copy of the SQLite database
            shutil.copytree(c.disk.directory, c.work / "lite-db",
                            ignore=shutil.ignore_patterns(".chaos-filler"))
        c.disk.close()
    if not keep:
        shutil.rmtree(c.work, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="faults to inject (20)")
    parser.add_argument("--seed", type=int, default=None,
                        help="draws the faults (default: a random one, printed)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--pg-url", default=None,
                       help="a PostgreSQL database the campaign may wipe (without it: a "
                            f"cluster of its own if it can, else ${PG_ENV})")
    where.add_argument("--pg-cluster", action="store_true",
                       help="a primary and synchronous standby of the campaign's own "
                            "(the default without a URL, when the server's binaries are "
                            "installed)")
    where.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument("--daemons", type=int, default=3, help="daemons on PostgreSQL (3)")
    parser.add_argument("--rate", type=float, default=12.0,
                        help="messages per second each producer sends (12)")
    parser.add_argument("--warmup", type=float, default=1.0,
                        help="seconds of traffic before the first fault (1)")
    parser.add_argument("--cooldown", type=float, default=5.0,
                        help="seconds of traffic after the last fault, in which every live "
                             "daemon must deliver (5)")
    parser.add_argument("--flood", type=int, default=500,
                        help="half-open connections of a portal flood (500)")
    parser.add_argument("--faults", default=None, metavar="KIND,...",
                        help=f"draw only these faults (of {', '.join(FAULTS)})")
    parser.add_argument("--excuse-late-heartbeats", action="store_true",
                        help="a claim lost while its daemon's heartbeat was older than the "
                             "lease is no violation (a loaded machine; the table still counts "
                             "late heartbeats); by default only a fault excuses it")
    parser.add_argument("--misjudge", action="append", metavar="ITEM=ROLE",
                        help="hold ITEM to ROLE in the checker (proves a wrong expectation "
                             "fails the run; for the campaign's own tests)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the working directory (daemon logs, SQLite database)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.rounds < 0 or args.daemons < 1 or args.rate <= 0:
        parser.error("--rounds must be ≥ 0, --daemons ≥ 1 and --rate > 0")
    unknown = set((args.faults or "").split(",")) - set(FAULTS) - {""}
    if unknown:
        parser.error(f"--faults: unknown {', '.join(sorted(unknown))}; expected some of "
                     f"{', '.join(FAULTS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    print(json.dumps(report) if args.json else table(report), flush=True)
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
