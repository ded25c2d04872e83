"""Several ``encore run`` processes on one PostgreSQL database (docs/architecture.md, issue 7):
every message delivered once, a killed daemon's work finished by the others, FIFO order kept
across a handover, scheduled services fired once, schema upgrades safe when run at once."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from engine.client import send_message
from engine.config.production import ProductionConfig, load_production
from engine.store.models import message_header
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, cli_env, encore
from tests.conftest import postgres_url, reset_postgres
from tests.servers import HttpTestServer, respond, sequence
from tests.waiting import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.cli_in_process]  # the daemons are processes

LEASE = 2  # seconds: lease_seconds of these productions, so a dead daemon is noticed fast
MESSAGES = 500


class Cluster:
    """A production file on the shared database, its store, and daemons running it."""

    def __init__(self, stack: ExitStack, tmp_path: Path, url: str, items: str, *,
                 poll_interval: float, lease_seconds: float = LEASE) -> None:
        self.stack = stack
        self.tmp_path = tmp_path
        (tmp_path / "production.toml").write_text(
            f'[production]\nname = "Scale"\ndatabase = "{url}"\n'
            f"poll_interval = {poll_interval}\nlease_seconds = {lease_seconds}\n{items}")
        encore("db", "upgrade", cwd=tmp_path)
        self.store = SqlStore(url)
        stack.callback(self.store.dispose)  # after the daemons: the stack unwinds backwards
        self.production: ProductionConfig = load_production(tmp_path / "production.toml")
        self.daemons: list[RunningDaemon] = []

    def start(self, n: int) -> list[RunningDaemon]:
        started = [self.stack.enter_context(RunningDaemon(self.tmp_path)) for _ in range(n)]
        self.daemons += started
        wait_until(lambda: all("production Scale started" in d.output for d in started), 30,
                   f"{n} daemon(s) to start")
        return started

    def registered(self) -> dict[int, str]:
        """pid → daemon id of the registered daemons."""
        with self.store.engine.connect() as conn:
            rows = conn.execute(text("SELECT pid, id FROM daemon")).all()
        return {pid: daemon_id for pid, daemon_id in rows}

    def by_id(self, daemon_id: str) -> RunningDaemon:
        pid = {v: k for k, v in self.registered().items()}[daemon_id]
        return next(d for d in self.daemons if d.proc.pid == pid)

    def lease_owner(self, name: str) -> str | None:
        row = self.store.leases.get(name)
        return row.owner if row is not None else None

    def send(self, target: str, body: object) -> int:
        return send_message(self.store, self.production, target, body)  # type: ignore[arg-type]

    def statuses(self, ids: list[int]) -> Counter[str]:
        with self.store.engine.connect() as conn:
            rows = conn.execute(select(message_header.c.status, func.count())
                                .where(message_header.c.id.in_(ids))
                                .group_by(message_header.c.status)).all()
        return Counter({status: count for status, count in rows})

    def all_completed(self, ids: list[int]) -> bool:
        return self.statuses(ids)["Completed"] == len(ids)


@pytest.fixture
def pg_url() -> str:
    url = postgres_url()
    reset_postgres(url)
    return url


@pytest.fixture
def cluster_stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def http_item(name: str, url: str, *, pool_size: int, **settings: object) -> str:
    body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    return (f'\n[[items]]\nname = "{name}"\nclass = "operations.http:HttpOperation"\n'
            f"pool_size = {pool_size}\n[items.settings]\nurl = \"{url}\"\n{body}")


def post(body: str) -> dict[str, str]:
    return {"method": "POST", "path": "/echo", "body": body}


def bodies(server: HttpTestServer) -> list[str]:
    return [r.body.decode() for r in list(server.requests)]


def unknown_outcome(store: SqlStore, mid: int) -> bool:
    return any((a.error_text or "").startswith("outcome unknown") for a in store.attempts(mid))


@pytest.mark.parametrize("daemons", [2, 3])
def test_every_message_is_delivered_exactly_once_by_several_daemons(
        tmp_path: Path, pg_url: str, cluster_stack: ExitStack, daemons: int) -> None:
    server = cluster_stack.enter_context(HttpTestServer({"/echo": respond(200, "ok",
                                                                          delay=0.02)}))
    # A long poll: idle workers are woken by NOTIFY, not by polling. No daemon dies here, so
    # a long lease: a busy CI machine must not make one daemon's claims look abandoned.
    cluster = Cluster(cluster_stack, tmp_path, pg_url, http_item("Echo", server.url, pool_size=4),
                      poll_interval=30, lease_seconds=30)
    cluster.start(daemons)
    with OwnerSampler(cluster.store) as owners:
        ids = [cluster.send("Echo", post(f"m{i:04d}")) for i in range(MESSAGES)]
        wait_until(lambda: cluster.all_completed(ids), 60, "every message to complete")
    seen = Counter(bodies(server))
    assert sorted(seen) == [f"m{i:04d}" for i in range(MESSAGES)]
    assert set(seen.values()) == {1}, [b for b, n in seen.items() if n > 1]
    assert owners.seen == set(cluster.registered().values())  # every daemon took a share
    started = time.monotonic()
    (last,) = [cluster.send("Echo", post("late"))]
    wait_until(lambda: cluster.all_completed([last]), 10, "a message sent to idle daemons")
    assert time.monotonic() - started < 5  # woken by NOTIFY, not by the 30 s poll


class OwnerSampler:
    """Notes, every few milliseconds, which daemons hold claims (``claimed_by``)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        query = text("SELECT DISTINCT claimed_by FROM message_header WHERE status = 'Delivered'")
        with self.store.engine.connect() as conn:
            while not self._stop.wait(0.005):
                self.seen.update(conn.execute(query).scalars())
                conn.rollback()

    def __enter__(self) -> OwnerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_a_killed_daemons_messages_are_finished_by_the_others(
        tmp_path: Path, pg_url: str, cluster_stack: ExitStack) -> None:
    server = cluster_stack.enter_context(HttpTestServer({"/echo": respond(200, "ok",
                                                                          delay=0.05)}))
    cluster = Cluster(cluster_stack, tmp_path, pg_url, http_item("Echo", server.url, pool_size=4),
                      poll_interval=0.2)
    victim, *_ = cluster.start(3)
    ids = [cluster.send("Echo", post(f"m{i:04d}")) for i in range(300)]
    wait_until(lambda: cluster.statuses(ids)["Completed"] >= 60, 30, "60 messages to complete")
    victim.kill()
    wait_until(lambda: cluster.all_completed(ids), 60, "the others to finish every message")
    seen = Counter(bodies(server))
    assert set(seen) == {f"m{i:04d}" for i in range(300)}  # none lost
    twice = [ids[int(body[1:])] for body, n in seen.items() if n > 1]
    assert all(n <= 2 for n in seen.values())
    assert all(unknown_outcome(cluster.store, mid) for mid in twice)
    # The victim was killed mid-attempt (its four workers are never idle for long): the
    # others took those messages over after its leases expired.
    assert any(unknown_outcome(cluster.store, mid) for mid in ids)


def test_a_fifo_item_keeps_its_order_when_its_daemon_is_killed(
        tmp_path: Path, pg_url: str, cluster_stack: ExitStack) -> None:
    server = cluster_stack.enter_context(HttpTestServer({"/echo": respond(200, "ok",
                                                                          delay=0.15)}))
    cluster = Cluster(cluster_stack, tmp_path, pg_url, http_item("Fifo", server.url, pool_size=1),
                      poll_interval=0.2)
    cluster.start(2)
    holder = wait_until(lambda: cluster.lease_owner("item:Fifo"), 10, "an item lease holder")
    ids = [cluster.send("Fifo", post(f"{i:02d}")) for i in range(20)]
    wait_until(lambda: len(server.requests) >= 6, 20, "six deliveries")
    cluster.by_id(holder).kill()
    wait_until(lambda: cluster.all_completed(ids), 30, "the survivor to finish the queue")
    arrivals = list(dict.fromkeys(bodies(server)))  # first arrival of each body, in order
    assert arrivals == [f"{i:02d}" for i in range(20)]
    survivor = cluster.lease_owner("item:Fifo")
    assert survivor is not None and survivor != holder
    seen = Counter(bodies(server))
    assert all(unknown_outcome(cluster.store, ids[int(b)]) for b, n in seen.items() if n > 1)


def test_a_scheduled_service_fires_once_per_interval_with_two_daemons(
        tmp_path: Path, pg_url: str, cluster_stack: ExitStack) -> None:
    items = ('\n[[items]]\nname = "Ticker"\nclass = "tests.acceptance.scale_hosts:TickService"\n'
             '[items.settings]\ncall_interval = 0.5\ntargets = ["Sink"]\n'
             '\n[[items]]\nname = "Sink"\nclass = "tests.acceptance.scale_hosts:SinkOperation"\n')
    cluster = Cluster(cluster_stack, tmp_path, pg_url, items, poll_interval=0.2)
    cluster.start(2)
    leader = wait_until(lambda: cluster.lease_owner("leader"), 10, "a leader")
    status = encore("status", cwd=tmp_path).stdout
    assert all(str(pid) in status for pid in cluster.registered())
    ids = set(cluster.registered().values())
    holders = [line for line in status.splitlines()
               if line.split(" ", 1)[0] in ids and "leader" in line]
    assert len(holders) == 1 and "item:Sink" in status  # one daemon holds the lease

    assert ticks_during(cluster, 4.0) in range(4, 11)  # 8 expected; two leaders would give 16
    cluster.by_id(leader).kill()
    wait_until(lambda: cluster.lease_owner("leader") not in (None, leader), 10,
               "another daemon to take the lead")
    assert ticks_during(cluster, 3.0) in range(2, 8)  # 6 expected, 12 if both fired


def ticks_during(cluster: Cluster, seconds: float) -> int:
    """Messages the services send in the next ``seconds``."""
    def count() -> int:
        with cluster.store.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(message_header)
                                    .where(message_header.c.target == "Sink")).scalar_one())

    before = count()
    time.sleep(seconds)
    return count() - before


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_schema_upgrades_all_succeed(tmp_path: Path, backend: str) -> None:
    if backend == "postgresql":
        url = postgres_url()
        reset_postgres(url)
    else:
        url = f"sqlite:///{tmp_path / 'e.db'}"
    (tmp_path / "production.toml").write_text(f'[production]\ndatabase = "{url}"\n')
    procs = [subprocess.Popen([sys.executable, "-m", "engine.cli", "db", "upgrade"],
                              cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [(p.wait(60), p.stderr.read() if p.stderr else "") for p in procs]
    for p in procs:
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()
    assert [code for code, _ in results] == [0] * 4, results
    store = SqlStore(url)
    store.check_schema()
    store.dispose()


@pytest.mark.parametrize(("revision", "says"), [
    # a schema from a newer Encore: refused, and upgrading with this one is not the fix
    ("9999", "newer than this Encore knows"),
    # an older schema: run the upgrade
    ("0001", "run `encore db upgrade`"),
])
def test_a_daemon_refuses_a_schema_it_does_not_match(
        tmp_path: Path, pg_url: str, cluster_stack: ExitStack, revision: str, says: str) -> None:
    cluster = Cluster(cluster_stack, tmp_path, pg_url, "", poll_interval=0.2)
    with cluster.store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    with RunningDaemon(tmp_path) as daemon:
        assert daemon.wait(30) == 1
    assert says in daemon.output
    if revision == "9999":
        result = encore("db", "upgrade", cwd=tmp_path, check=False)
        assert result.returncode == 1 and says in result.stderr


def test_a_daemon_frozen_past_its_lease_never_resends_what_another_took_over(
        tmp_path: Path, pg_url: str, cluster_stack: ExitStack) -> None:
    # the first attempt gets a 503 and waits 3 s to retry; meanwhile its daemon is frozen
    # (SIGSTOP, as a paused VM) past its lease, and another daemon takes the message over
    server = cluster_stack.enter_context(HttpTestServer({"/echo": sequence(
        respond(503), respond(200, "ok"))}))
    cluster = Cluster(cluster_stack, tmp_path, pg_url,
                      http_item("Pay", server.url, pool_size=2, idempotent=False,
                                retry_interval=3, failure_timeout=60),
                      poll_interval=0.2)
    first, second = cluster.start(2)
    mid = cluster.send("Pay", post("pay-1"))
    wait_until(lambda: len(server.requests) == 1, 20, "the first attempt")
    # freeze it only once the 503 is on record: frozen between the answer and its record,
    # the attempt would be open, so outcome unknown, and this item is not re-sent then
    wait_until(lambda: [a.ended_at is not None for a in cluster.store.attempts(mid)] == [True],
               20, "the first attempt's 503 on record")
    holder = cluster.store.get_message(mid).claimed_by
    frozen = cluster.by_id(holder)
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: cluster.all_completed([mid]), 30, "the other daemon to finish it")
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    # its retry wait ends: it must find its claim gone and send nothing
    wait_until(lambda: "another daemon has taken it over" in frozen.output, 30,
               "the frozen daemon to find its claim gone")
    assert bodies(server) == ["pay-1", "pay-1"]  # the 503, then the other daemon's attempt
    attempts = cluster.store.attempts(mid)
    assert [a.attempt for a in attempts] == [1, 2]
    assert cluster.store.get_message(mid).status == "Completed"
