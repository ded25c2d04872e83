"""A step of one host's wall clock (an NTP step, a resumed VM), the monotonic clock untouched,
during deliveries (docs/architecture.md, "Which clock decides what"): every message ends as
the server answered it, no claim of a live daemon is released, and no retry comes more than
one retry interval early or late — on SQLite, and on PostgreSQL with two daemons of which
only one host's clock steps. libfaketime steps the daemon's clock (tests/stepped_clock.py)."""
from __future__ import annotations

import threading
from collections import Counter, defaultdict
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import select

from engine.errors import CRASH_TEXT
from engine.store.models import event_log
from tests.acceptance.daemon import RunningDaemon
from tests.acceptance.test_scale_out import Cluster, http_item
from tests.conftest import postgres_url, reset_postgres
from tests.servers import HttpTestServer, Recorded, respond
from tests.stepped_clock import SteppedDaemon, SteppedWallClock
from tests.waiting import wait_until

RETRY = 2.0  # retry_interval of the items that retry: the bound on early and late
PER_ITEM = 6


def refused(times: int = 1) -> object:
    """503 for a body its first ``times`` times, 200 after: that many retries a message."""
    seen: Counter[bytes] = Counter()
    lock = threading.Lock()

    def route(handler: object, record: Recorded) -> None:
        with lock:
            seen[record.body] += 1
            refuse = seen[record.body] <= times
        respond(503 if refuse else 200, "later" if refuse else "ok")(handler, record)  # type: ignore[arg-type]
    return route


def items(server: HttpTestServer) -> str:
    url = server.url
    return (http_item("Idem", url, pool_size=3, response_timeout=10)
            + http_item("Once", url, pool_size=3, response_timeout=10, idempotent=False)
            + http_item("Block", url, pool_size=2, retry_interval=RETRY, failure_timeout=60)
            + http_item("Park", url, pool_size=2, retry_interval=RETRY, failure_timeout=60,
                        retry_mode="requeue"))


PATHS = {"Idem": "/slow", "Once": "/slow", "Block": "/flaky", "Park": "/flaky"}


def run_through_a_step(stack: ExitStack, tmp_path: Path, url: str, step: int, *,
                       others: int) -> tuple[Cluster, HttpTestServer, dict[str, list[int]]]:
    """One stepped daemon (and ``others`` whose clock stays) deliver every item's messages;
    the stepped one's wall clock steps by ``step`` seconds while attempts are out and
    retries wait. Returns once every message is final."""
    server = stack.enter_context(HttpTestServer({"/slow": respond(200, "ok", delay=1.0),
                                                 "/flaky": refused()}))
    cluster = Cluster(stack, tmp_path, url, items(server), poll_interval=0.2, lease_seconds=2)
    clock = SteppedWallClock(tmp_path / "faketime")
    stepped = stack.enter_context(SteppedDaemon(tmp_path, clock))
    cluster.daemons.append(stepped)
    started: list[RunningDaemon] = [stepped]
    started += [stack.enter_context(RunningDaemon(tmp_path)) for _ in range(others)]
    wait_until(lambda: all("production Scale started" in d.output for d in started), 60,
               "the daemons to start")
    ids: dict[str, list[int]] = defaultdict(list)
    for i in range(PER_ITEM):
        for item in ("Idem", "Once", "Block", "Park"):
            ids[item].append(cluster.send(item, {"method": "POST", "path": PATHS[item],
                                                 "body": f"{item}-{i}"}))
    wait_until(lambda: len(server.requests) >= 8, 30, "attempts to be out")
    clock.step(step)
    everything = [i for group in ids.values() for i in group]
    try:
        wait_until(lambda: _final(cluster, everything), 90, "every message to end")
    except AssertionError:
        raise AssertionError(f"{cluster.statuses(everything)}; "
                             f"{[d.output for d in started]}") from None
    return cluster, server, ids


def _final(cluster: Cluster, ids: list[int]) -> bool:
    counts = cluster.statuses(ids)
    return counts["Queued"] + counts["Delivered"] == 0


def assert_every_message_ended_as_answered(cluster: Cluster, server: HttpTestServer,
                                           ids: dict[str, list[int]]) -> None:
    everything = [i for group in ids.values() for i in group]
    assert cluster.statuses(everything) == Counter({"Completed": len(everything)})
    arrivals: dict[str, list[float]] = defaultdict(list)
    for record in list(server.requests):
        arrivals[record.body.decode()].append(record.at)
    for item in ("Idem", "Once"):  # no claim released: nothing was sent again
        for i in range(PER_ITEM):
            assert len(arrivals[_key(arrivals, f"{item}-{i}")]) == 1, (item, i)
    for item in ("Block", "Park"):  # refused once, then sent one retry interval later
        for i in range(PER_ITEM):
            first, second = arrivals[_key(arrivals, f"{item}-{i}")]
            assert 0 <= second - first <= 2 * RETRY + 1.5, (item, i, second - first)
    for mid in everything:
        assert not any((a.error_text or "") == CRASH_TEXT or "taken over" in (a.error_text or "")
                       for a in cluster.store.attempts(mid)), mid


def _key(arrivals: dict[str, list[float]], tag: str) -> str:
    return tag


def clock_events(cluster: Cluster) -> list[str]:
    with cluster.store.engine.connect() as conn:
        return list(conn.execute(select(event_log.c.text).where(
            event_log.c.text.like("%wall clock stepped%"))).scalars())


@pytest.mark.parametrize("step", [600, -600])
def test_a_wall_clock_step_on_sqlite(tmp_path: Path, step: int) -> None:
    with ExitStack() as stack:
        cluster, server, ids = run_through_a_step(stack, tmp_path,
                                                  f"sqlite:///{tmp_path / 'encore.db'}", step,
                                                  others=0)
        assert_every_message_ended_as_answered(cluster, server, ids)
        (event,) = clock_events(cluster)  # the daemon saw it, and said so once
        assert abs(float(event.split("stepped by ")[1].split(" s")[0]) - step) < 5


@pytest.mark.postgres
@pytest.mark.parametrize("step", [600, -600])
def test_a_wall_clock_step_on_one_of_two_postgresql_daemons(tmp_path: Path, step: int) -> None:
    url = postgres_url()
    reset_postgres(url)
    with ExitStack() as stack:
        cluster, server, ids = run_through_a_step(stack, tmp_path, url, step, others=1)
        assert_every_message_ended_as_answered(cluster, server, ids)
        assert clock_events(cluster) == []  # the server's clock did not step: nothing moved


@pytest.mark.parametrize("step", [600, -600])
def test_a_daemon_restarted_after_a_step_on_sqlite_keeps_each_retrys_time(
        tmp_path: Path, step: int) -> None:
    """The wall clock steps while no daemon runs: the next one to start carries the parked
    retries across the step (the file's clock frame), so a retry neither fires a step early
    — nor with its failure timeout run out — nor waits the step out."""
    with ExitStack() as stack:
        server = stack.enter_context(HttpTestServer({"/flaky": refused(2)}))
        interval = 4.0
        cluster = Cluster(stack, tmp_path, f"sqlite:///{tmp_path / 'encore.db'}",
                          http_item("Park", server.url, pool_size=2, retry_interval=interval,
                                    failure_timeout=60, retry_mode="requeue"),
                          poll_interval=0.2, lease_seconds=2)
        clock = SteppedWallClock(tmp_path / "faketime")
        first = stack.enter_context(SteppedDaemon(tmp_path, clock))
        wait_until(lambda: "production Scale started" in first.output, 60, "the daemon")
        ids = [cluster.send("Park", {"method": "POST", "path": "/flaky", "body": f"p-{i}"})
               for i in range(3)]
        wait_until(lambda: len(server.requests) == 3, 30, "the first attempts")
        assert first.terminate() == 0  # the retries stay parked
        clock.step(step)
        second = stack.enter_context(SteppedDaemon(tmp_path, clock))
        wait_until(lambda: _final(cluster, ids), 60, "the retries")
        assert cluster.statuses(ids) == Counter({"Completed": 3}), second.output
        arrivals: dict[str, list[float]] = defaultdict(list)
        for record in list(server.requests):
            arrivals[record.body.decode()].append(record.at)
        for tag, times in arrivals.items():  # refused twice: three attempts, each on time
            assert len(times) == 3, tag
            for sent, again in zip(times, times[1:], strict=False):
                assert interval - 1 <= again - sent <= 2 * interval + 1.5, (tag, again - sent)
        assert len(clock_events(cluster)) == 1
