"""The fault campaign, short (issue 22 point 7, issue 36 item 11): ``bench/chaos.py`` for a
pass of every fault it can inject — kill -9, SIGSTOP past the lease, database restart,
connections cut, blackholed and delayed, disk full on SQLite, a portal flood, a daemon's
wall clock stepped ±10 min (libfaketime: CI installs Debian's ``faketime``), a live stall
(the GIL held past the lease), hostile XML in and out — on PostgreSQL
(``ENCORE_TEST_POSTGRES_URL``: CI sets it, and then this runs, never skips) and SQLite, and
the checker (bench/chaos_checker.py) finds no violation: FIFO order over every request,
every message the server answered 2xx Completed, no claim of an unfaulted daemon lost, no
stall on XML. With the server's binaries installed, a second run adds real primary
failovers on a cluster of its own.

A campaign that cannot fail proves nothing: the last test holds an idempotent item to the
non-idempotent rule and expects the run to fail, from the server's own count."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.chaos_clock import faketime_library
from tests.conftest import POSTGRES_ENV, postgres_url
from tests.integration.pg_cluster import find_bindir

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]
SQLITE_FAULTS = {"kill9", "sigstop", "portal_flood", "disk_full", "live_stall", "hostile_xml"}
# a clock step needs libfaketime (Debian's faketime package, which .ci/run installs)
CLOCK_FAULTS = {"clock_step"} if faketime_library() else set()
PG_FAULTS = {"db_restart", "cut", "blackhole", "delay"}


def campaign(*args: str) -> tuple[int, dict[str, Any], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), "--json",
                             *args], capture_output=True, text=True, timeout=380, env=env,
                            cwd=ROOT)
    lines = result.stdout.strip().splitlines()
    assert lines, f"no report (status {result.returncode}):\n{result.stderr[-4000:]}"
    return result.returncode, json.loads(lines[-1]), result.stderr


def assert_clean(code: int, report: dict[str, Any], stderr: str) -> None:
    assert report["violations"] == 0, report["examples"]
    assert code == 0, stderr[-4000:]
    for name, db in report["databases"].items():
        assert db["accepted"] > 50, (name, db)
        assert db["messages"] >= db["accepted"], (name, db)
        assert db["statuses"].get("Completed", 0) > 0, (name, db)
        assert db["requests"] >= db["statuses"]["Completed"], (name, db)
        assert set(db["statuses"]) <= {"Completed", "Error", "Suspended"}, (name, db)


def test_a_pass_of_every_fault_on_postgresql_and_sqlite_breaks_no_invariant() -> None:
    on_pg = bool(os.environ.get(POSTGRES_ENV))
    where = ["--pg-url", postgres_url()] if on_pg else ["--no-pg"]
    faults = SQLITE_FAULTS | CLOCK_FAULTS | (PG_FAULTS if on_pg else set())
    # the suite runs beside other tests: a claim lost while its daemon's heartbeat was late
    # (a loaded machine) is not a fault's; a clock step is still caught (reconciliation,
    # stuck), and the long run of RELIABILITY.md holds the strict rule
    code, report, stderr = campaign("--rounds", str(len(faults)), "--seed", "22",
                                    "--excuse-late-heartbeats", *where)
    assert_clean(code, report, stderr)
    assert set(report["faults"]) == faults  # every kind once
    assert set(report["databases"]) == ({"postgresql", "sqlite"} if on_pg else {"sqlite"})
    assert report["postgresql"] == ("external" if on_pg else "none")


def test_primary_failovers_and_restarts_on_a_cluster_of_its_own() -> None:
    if find_bindir() is None:
        pytest.skip("the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup, psql) "
                    "are not installed: set PG_BINDIR or install postgresql")
    code, report, stderr = campaign("--pg-cluster", "--no-sqlite", "--rounds", "6",
                                    "--seed", "7", "--faults", "failover,db_restart,kill9")
    assert_clean(code, report, stderr)
    assert report["postgresql"] == "cluster"
    assert report["faults"] == {"db_restart": 2, "failover": 2, "kill9": 2}


def test_the_campaign_fails_when_an_invariant_is_broken() -> None:
    # The idempotent item re-sends what a slow answer left unknown (the server's !slow
    # tags): held to the non-idempotent rule, the server's count must condemn it.
    code, report, _ = campaign("--no-pg", "--rounds", "0", "--warmup", "6", "--seed", "1",
                               "--misjudge", "Idem=once")
    assert code == 1
    found = report["databases"]["sqlite"]["violations"]
    assert found["sent_twice"] >= 1
    assert {k: v for k, v in found.items() if v} == {"sent_twice": found["sent_twice"]}
    assert all("sent_twice: " in line and "Idem" in line for line in report["examples"])
