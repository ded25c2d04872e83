"""The circuit breaker and the rate limit with real daemons (``encore run``) against a real
loopback server (docs/guards.md): one daemon on SQLite, and two sharing PostgreSQL."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from engine.store.models import event_log, message_attempt
from tests.acceptance.daemon import encore
from tests.acceptance.test_scale_out import Cluster, http_item, post
from tests.conftest import postgres_url, reset_postgres
from tests.servers import HttpTestServer, Recorded, _Handler, respond
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemon is a process; the commands need not be

OUTAGE = 3.0  # seconds the server answers 503
OPEN_SECONDS = 4.0  # breaker_open_seconds: the probe comes after the outage
RACING_GRACE = 0.5  # seconds after the opening in which another daemon may still start one
MESSAGES = 12
LATE = 0.2  # seconds a request may arrive after its rate-limit slot on a busy machine


class Outage:
    """A route that answers 503 for ``seconds`` from :meth:`start`, then 200."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.until = float("inf")
        self._down, self._up = respond(503, "down"), respond(200, "ok")

    def start(self) -> None:
        self.until = time.monotonic() + self.seconds

    def __call__(self, handler: _Handler, record: Recorded) -> None:
        (self._down if record.at < self.until else self._up)(handler, record)


@pytest.fixture(params=[("sqlite", 1), ("postgresql", 2)],
                ids=["one daemon on SQLite", "two daemons on PostgreSQL"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, int]:
    backend, daemons = request.param
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'encore.db'}", daemons
    url = postgres_url()
    reset_postgres(url)
    return url, daemons


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def breaker_events(cluster: Cluster) -> list[tuple[str, object, str]]:
    e = event_log.c
    with cluster.store.engine.connect() as conn:
        rows = conn.execute(select(e.type, e.time_logged, e.text)
                            .where(e.source_class == "CircuitBreaker").order_by(e.id)).all()
    return [(r.type, r.time_logged, r.text) for r in rows]


def attempt_starts(cluster: Cluster) -> list[object]:
    a = message_attempt.c
    with cluster.store.engine.connect() as conn:
        return list(conn.execute(select(a.started_at).order_by(a.started_at)).scalars())


def test_a_server_down_for_3_s_opens_the_breaker_once_and_one_probe_closes_it(
        tmp_path: Path, stack: ExitStack, setup: tuple[str, int]) -> None:
    url, daemons = setup
    outage = Outage(OUTAGE)
    server = stack.enter_context(HttpTestServer({"/echo": outage}))
    cluster = Cluster(stack, tmp_path, url, http_item(
        "Pay", server.url, pool_size=2, retry_interval=0.5, failure_timeout=60,
        response_timeout=2, breaker_threshold=3, breaker_open_seconds=OPEN_SECONDS),
        poll_interval=0.2, lease_seconds=10)
    cluster.start(daemons)
    outage.start()
    ids = [cluster.send("Pay", post(f"m{i:02d}")) for i in range(MESSAGES)]
    wait_until(lambda: breaker_events(cluster), 20, "the breaker to open")
    status = encore("status", cwd=tmp_path).stdout
    assert "open, probe in" in status, status
    wait_until(lambda: cluster.all_completed(ids), 30, "every message to complete")

    (warning, opened, text), (info, closed, _) = breaker_events(cluster)
    assert (warning, info) == ("Warning", "Info") and "after 3 consecutive" in text
    # While open no attempt starts on any daemon (past a moment for one that raced the
    # opening); then exactly one, the probe, once the open period is over.
    starts = [s for s in attempt_starts(cluster)
              if opened + timedelta(seconds=RACING_GRACE) < s < closed]
    assert len(starts) == 1, starts
    assert starts[0] >= opened + timedelta(seconds=OPEN_SECONDS - 0.05)
    # Nothing lost: every message arrived, and the ones after the outage all succeeded.
    arrived = {r.body.decode() for r in server.requests}
    assert arrived == {f"m{i:02d}" for i in range(MESSAGES)}
    assert sum(1 for r in server.requests if r.at >= outage.until) == MESSAGES
    assert "closed" in encore("status", cwd=tmp_path).stdout


def test_twenty_messages_at_5_per_s_are_spread_over_3_s(
        tmp_path: Path, stack: ExitStack, setup: tuple[str, int]) -> None:
    url, daemons = setup
    server = stack.enter_context(HttpTestServer({"/echo": respond(200, "ok")}))
    cluster = Cluster(stack, tmp_path, url, http_item("Rated", server.url, pool_size=4,
                                                      rate_limit="5/s"),
                      poll_interval=0.2, lease_seconds=10)
    cluster.start(daemons)
    time.sleep(1.0)  # an idle bucket is full: the burst is 5, not more
    ids = [cluster.send("Rated", post(f"r{i:02d}")) for i in range(20)]
    wait_until(lambda: cluster.all_completed(ids), 30, "every message to complete")
    first = min(r.at for r in server.requests)
    arrivals = sorted(r.at - first for r in server.requests)
    assert len(arrivals) == 20
    # 5 at once, then one every 0.2 s: 3 s from the first slot to the last (less the moment
    # the first request may have taken to arrive after its slot)
    assert arrivals[-1] >= 3.0 - LATE, arrivals
    for k, t in enumerate(arrivals):  # the k-th never before its slot
        assert t >= (k - 4) * 0.2 - LATE, (k, arrivals)
    assert sum(1 for t in arrivals if t < 0.1) <= 5  # the burst is at most N


def test_a_daemon_stops_at_once_while_its_workers_wait_for_slots(
        tmp_path: Path, stack: ExitStack) -> None:
    server = stack.enter_context(HttpTestServer({"/echo": respond(200, "ok")}))
    cluster = Cluster(stack, tmp_path, f"sqlite:///{tmp_path / 'e.db'}",
                      http_item("Slow", server.url, pool_size=2, rate_limit="1/h"),
                      poll_interval=0.2)
    (daemon,) = cluster.start(1)
    ids = [cluster.send("Slow", post(f"s{i}")) for i in range(3)]
    wait_until(lambda: len(server.requests) == 1, 10, "the one slot of the hour")
    time.sleep(0.5)  # the two others are waiting for theirs
    stopped = time.monotonic()
    assert daemon.terminate(30) == 0
    assert time.monotonic() - stopped < 10
    assert cluster.statuses(ids) == {"Completed": 1, "Queued": 2}
    assert len(server.requests) == 1
    assert "waited for a slot of rate_limit 1/h" in daemon.output  # held back unsent



def test_simulate_shows_what_a_breaker_does_to_the_timeline(tmp_path: Path) -> None:
    out = encore("simulate", "--response-timeout", "7", "--retry-interval", "10",
                 "--failure-timeout", "100", "--server-delay", "1", "--fail-first", "3",
                 "--status", "503", "--breaker-threshold", "2", "--breaker-open-seconds", "30",
                 "--json", cwd=tmp_path).stdout
    events = json.loads(out)
    assert all(set(e) == {"t", "event", "attempt", "server"} for e in events)
    assert [(e["t"], e["event"]) for e in events if e["event"].startswith("breaker_")] == [
        (11, "breaker_open"), (20, "breaker_hold"), (41, "breaker_half_open"),
        (42, "breaker_open"), (51, "breaker_hold"), (72, "breaker_half_open"),
        (73, "breaker_close")]
    assert events[-1] == {"t": 73, "event": "success", "attempt": 4, "server": None}
    text = encore("simulate", "--server-delay", "1", "--fail-first", "3", "--status", "503",
                  "--failure-timeout", "100", "--breaker-threshold", "2", cwd=tmp_path).stdout
    assert "breaker_half_open" in text and "Completed" in text
    refused = encore("simulate", "--breaker-open-seconds", "0", cwd=tmp_path, check=False)
    assert refused.returncode == 1 and "breaker_open_seconds" in refused.stderr
