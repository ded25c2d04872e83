"""Encore's benchmarks (issue 8): the engine against bare clients and its own limits.

    python bench/run.py [--quick] [--json] [--pg-url URL] [--only NAME ...] [--profile]
                        [--profile-pool]

Starts its own loopback servers (a SOAP service and plain HTTP servers, in a child process),
runs every scenario and prints a table of figures against their targets. ``--json`` prints
one JSON object with exactly the keys of the issue's table (null where a scenario could not
run, with the reason on stderr). ``--quick`` runs every scenario small (about two minutes on
two cores, and a minute and a half more while waits poll every 50 ms: the latencies of
issue 21 take that long to collect). PostgreSQL scenarios use ``--pg-url`` or
``$ENCORE_BENCH_POSTGRES_URL``, a database the benchmark may wipe. ``--profile`` profiles
the no-op and SOAP daemon paths instead: a census of the database work per message, the
cost of a commit and py-spy profiles of the dispatcher and worker threads (see
bench/profile.py). ``--profile-pool`` profiles pool_size 1, 2, 4 and 16 on a no-op item and
a 2 ms loopback service (issue 27, bench/pool_profile.py). BENCHMARKS.md has the figures and
how they were obtained.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `python bench/run.py` puts bench/, not the root, on the path; the checkout's engine comes
# first, as it does for the `encore run` subprocesses (PYTHONPATH).
sys.path.insert(0, str(ROOT))

from bench import (
    celery_peer,
    drain,
    harness,
    hostile_xml,
    inbound,
    intake_http,
    latency,
    limits,
    login_flood,
    pool,
    purge,
    throughput,
    viewer,
)
from bench.report import KEYS, Outcome, table
from bench.servers import ServerProcess

PG_ENV = "ENCORE_BENCH_POSTGRES_URL"
SCENARIOS = ("overhead", "noop", "drain", "drain_pg", "intake", "intake_http", "pool",
             "timing", "parked", "parked16", "pg_two", "deadline",
             # issue 21: answers (bench/latency.py), concurrent HTTP intake, the Celery peer
             # (after "latency": sync_vs_celery needs both) and the CLI's start
             "latency", "latency_pg", "intake_http16", "celery", "cli",
             # issue 27 (bench/pool.py): pool 4 ÷ pool 1 no-op drains (SQLite, PostgreSQL),
             # pool 4 against a 2 ms service ÷ bare requests, pool 4 ÷ dramatiq on RabbitMQ
             "pool4", "pool4_fast", "dramatiq",
             # issue 23 (bench/viewer.py): property search and export on 1,000,000 messages
             # (100,000 with --quick)
             "viewer",
             # issue 36 (bench/purge.py): the purge of 200,000 finished requests
             "purge",
             # issue 25 (bench/inbound.py): SoapService's added latency, HttpService intake
             "inbound",
             # issue 36 (bench/hostile_xml.py): another item's delays under hostile XML
             "hostile_xml",
             # issue 36 (bench/login_flood.py): 80 logins at once: RSS, delivery p99
             "login_flood")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (~2 minutes)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--pg-url", default=None,
                        help=f"PostgreSQL database the bench may wipe (default: ${PG_ENV})")
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, default=None,
                        help="run only these scenarios")
    parser.add_argument("--profile", action="store_true",
                        help="profile the no-op and SOAP daemon paths instead (census, "
                             "commit costs, py-spy)")
    parser.add_argument("--profile-pool", action="store_true",
                        help="profile pool_size 1, 2, 4 and 16 instead (issue 27: msg/s, CPU "
                             "per thread, context switches, claims and commits per message; "
                             "see bench/pool_profile.py)")
    parser.add_argument("-v", "--verbose", action="store_true", help="engine logs to stderr")
    return parser.parse_args(argv)


def run_scenarios(args: argparse.Namespace, pg_url: str | None) -> Outcome:
    sizes = throughput.QUICK if args.quick else throughput.FULL
    answers = latency.QUICK if args.quick else latency.FULL
    pools = pool.QUICK if args.quick else pool.FULL
    wanted = set(args.only or SCENARIOS)
    total = Outcome()
    with ServerProcess() as servers, harness.workdir() as work:
        urls = servers.urls
        plan = {
            "overhead": lambda: throughput.overhead(work, urls, sizes),
            "noop": lambda: throughput.noop(work, sizes, pg_url),
            "drain": lambda: drain.sqlite_drain(work, sizes.drain),
            "drain_pg": lambda: drain.pg_drain(pg_url, sizes.drain_pg),
            "intake": lambda: drain.intake(work, sizes.intake, sizes.intake_many),
            "intake_http": lambda: intake_http.intake_http(work, sizes.intake),
            "pool": lambda: throughput.pool_speedup(work, urls, sizes),
            "timing": lambda: limits.timing(work, urls, sizes.timing_runs),
            "parked": lambda: limits.parked(work, sizes.idle_window_s),
            "parked16": lambda: limits.parked_pool16(work, sizes.idle_window_s),
            "pg_two": lambda: throughput.pg_two_daemons(work, urls, sizes, pg_url),
            "deadline": lambda: limits.deadline(urls),
            "latency": lambda: latency.latency(work, answers),
            "latency_pg": lambda: latency.latency_pg(work, answers, pg_url),
            "intake_http16": lambda: intake_http.intake_http16(work, sizes.intake),
            "celery": lambda: celery_peer.celery(work, answers.roundtrips),
            "cli": lambda: latency.cli(work),
            "pool4": lambda: pool.noop_pool4(work, pools, pg_url),
            "pool4_fast": lambda: pool.pool4_fast(work, urls, pools),
            "dramatiq": lambda: pool.dramatiq(work, pools),
            "viewer": lambda: viewer.outcome(work, args.quick, pg_url),
            "purge": lambda: purge.outcome(work, pg_url),
            "inbound": lambda: inbound.inbound(work, quick=args.quick),
            "hostile_xml": lambda: hostile_xml.hostile_xml(work, quick=args.quick),
            "login_flood": lambda: login_flood.login_flood(work),
        }
        for name in SCENARIOS:
            if name not in wanted:
                continue
            t0 = time.monotonic()
            print(f"[bench] {name} …", file=sys.stderr, flush=True)
            outcome = plan[name]()
            print(f"[bench] {name} done in {time.monotonic() - t0:.1f} s; load average "
                  f"{_loadavg()}", file=sys.stderr, flush=True)
            total.values.update(outcome.values)
            total.rows += outcome.rows
            total.notes += outcome.notes
    if "celery" in wanted:
        _sync_vs_celery(total)
    return total


def _sync_vs_celery(total: Outcome) -> None:
    """sync_vs_celery: Celery's round trip p50 ÷ Encore's sync_roundtrip_ms_p50, same run."""
    celery, encore = (total.values.get("celery_roundtrip_ms_p50"),
                      total.values.get("sync_roundtrip_ms_p50"))
    if celery is None or encore is None:
        missing = "celery_roundtrip_ms_p50" if celery is None else "sync_roundtrip_ms_p50"
        print(f"[bench] sync_vs_celery is null: {missing} is unknown in this run (the "
              "\"celery\" and \"latency\" scenarios are both needed)", file=sys.stderr,
              flush=True)
        total.key("sync_vs_celery", "Celery round trip ÷ Encore's sync round trip", None)
        return
    total.key("sync_vs_celery", "Celery round trip p50 ÷ Encore's sync round trip p50",
              celery / encore, note=f"{celery:.2f} ms ÷ {encore:.2f} ms")


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL,
                        stream=sys.stderr)
    pg_url = args.pg_url or os.environ.get(PG_ENV) or None
    if args.profile_pool:
        from bench import pool_profile
        print(pool_profile.run(quick=args.quick, pg_url=pg_url))
        return 0
    if args.profile:
        from bench import profile
        print(profile.run(quick=args.quick, pg_url=pg_url))
        return 0
    if pg_url is None:
        print(f"[bench] no PostgreSQL: noop_msgs_per_s_pg, noop_drain_msgs_per_s_pg, "
              f"pgqueuer_drain_ratio, pg_two_daemon_ratio, sync_roundtrip_ms_p50_pg, "
              f"pickup_ms_p50_pg and noop_pool4_ratio_pg are null (pass --pg-url or set {PG_ENV})",
              file=sys.stderr)
    t0, load0 = time.monotonic(), _loadavg()
    outcome = run_scenarios(args, pg_url)
    footer = (f"{'quick' if args.quick else 'full'} run, {time.monotonic() - t0:.0f} s; "
              f"load average {load0} before, {_loadavg()} after (other work on the machine "
              "skews the figures)")
    if args.json:
        print(json.dumps({key: outcome.values.get(key) for key in KEYS}))
        print(f"[bench] {footer}", file=sys.stderr)
    else:
        print(table(outcome.rows, outcome.values))
        print(f"\n{footer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
