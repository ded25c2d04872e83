"""PostgreSQL with a standby (docs/architecture.md, issue 22 point 6): a daemon, a producer and the
command line on a multi-host URL ride out the death of the primary and the promotion of its
synchronous standby — delivery resumes within 10 s of the promotion, every accepted message
ends, no non-idempotent request is sent twice.

Real servers, no mock: :mod:`tests.integration.pg_cluster` starts a primary and a
synchronous standby of the test's own on loopback ports."""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from engine.client import send_message
from engine.config.production import load_production
from engine.store.lite import LiteIntake
from engine.store.sql import SqlStore
from engine.store.statuses import ENDED_STATUSES
from tests.acceptance.daemon import RunningDaemon, encore
from tests.integration.pg_cluster import PgCluster, pg_cluster  # noqa: F401 - the fixture
from tests.servers import HttpTestServer, respond
from tests.waiting import wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.cli_in_process]  # the daemon is a process

LEASE = 2  # seconds: a claim whose completion was lost in the failover expires fast
RESUME_WITHIN = 10.0  # seconds from the promotion to the first delivery (docs/architecture.md)
OUTAGE = 1.0  # seconds between the primary's death and the promotion (a failover manager)


def http_item(name: str, url: str, *, idempotent: bool) -> str:
    return (f'\n[[items]]\nname = "{name}"\nclass = "operations.http:HttpOperation"\n'
            f"pool_size = 3\n[items.settings]\nurl = \"{url}\"\n"
            f"idempotent = {json.dumps(idempotent)}\nretry_interval = 0.2\n"
            "failure_timeout = -1\nresponse_timeout = 5\n")


class Producer:
    """Sends a message to each item every ``interval`` seconds, through its own store on the
    multi-host URL, until stopped; a send the database refuses is not accepted (its
    message may exist all the same: the commit may have reached the standby)."""

    def __init__(self, store: SqlStore, production: object, items: tuple[str, ...],
                 interval: float = 0.05) -> None:
        self.store = store
        self.production = production
        self.items = items
        self.interval = interval
        self.accepted: dict[str, int] = {}  # body → message id
        self.refused = 0
        self.accepted_at: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="producer")

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self.interval):
            for item in self.items:
                body = f"{item}-{n:05d}"
                try:
                    mid = send_message(self.store, self.production,  # type: ignore[arg-type]
                                       item, {"method": "POST", "path": "/echo",
                                              "body": body})
                except Exception:  # the database is away: not accepted
                    self.refused += 1
                    continue
                self.accepted[body] = mid
                self.accepted_at.append((time.monotonic(), body))
            n += 1

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer({"/echo": respond(200, "ok", delay=0.02)}) as s:
        yield s


def statuses(store: SqlStore) -> dict[int, str]:
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT id, status FROM message_header "
                                 "WHERE kind = 'request'")).all()
    return {int(mid): status for mid, status in rows}


def first_request_of(server: HttpTestServer, bodies: set[str]) -> float | None:
    """When the server first received one of ``bodies`` (monotonic), if it did."""
    return min((r.at for r in list(server.requests) if r.body.decode() in bodies),
               default=None)


def test_a_daemon_rides_out_the_failover_to_its_synchronous_standby(
        pg_cluster: PgCluster, server: HttpTestServer, tmp_path: Path) -> None:
    url = pg_cluster.url()
    (tmp_path / "production.toml").write_text(
        f'[production]\nname = "Failover"\ndatabase = "{url}"\n'
        # a long poll: after the failover, new work is heard by the LISTEN connection (on
        # the new primary) or not for 30 s
        f"poll_interval = 30\nlease_seconds = {LEASE}\n"
        + http_item("Idem", server.url, idempotent=True)
        + http_item("Once", server.url, idempotent=False))
    encore("db", "upgrade", cwd=tmp_path)
    production = load_production(tmp_path / "production.toml")
    store = SqlStore(url)
    try:
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: "production Failover started" in daemon.output, 30,
                       "the daemon to start")
            cli_before = encore("send", "Once", "--body", json.dumps(
                {"method": "POST", "path": "/echo", "body": "cli-before"}), cwd=tmp_path)
            with Producer(store, production, ("Idem", "Once")) as producer:
                wait_until(lambda: len(server.requests) >= 40, 30, "deliveries to begin")
                pg_cluster.primary.kill()
                time.sleep(OUTAGE)
                pg_cluster.standby.promote()
                promoted = time.monotonic()
                # resumed: the first request of a message accepted after the promotion
                # (one the daemon can only have claimed from the new primary)
                resumed = wait_until(lambda: first_request_of(server, {
                    body for at, body in list(producer.accepted_at) if at > promoted}),
                    30, "delivery to resume on the new primary")
                time.sleep(4)  # the producer keeps sending on the new primary
            # the daemon LISTENs on the new primary (a standby refuses LISTEN: this
            # session was opened after the promotion)
            listening = pg_cluster.standby.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN encore_%'",
                database="encore")
            cli_after = encore("send", "Once", "--body", json.dumps(
                {"method": "POST", "path": "/echo", "body": "cli-after"}), cwd=tmp_path)
            accepted = dict(producer.accepted)
            ids = set(accepted.values())

            def all_ended() -> bool:
                now = statuses(store)
                return all(now.get(mid) in ENDED_STATUSES for mid in ids) and all(
                    s in ENDED_STATUSES for s in now.values())

            wait_until(all_ended, 40, "every message to end")
            final = statuses(store)
            reasons = {mid: [a.error_text for a in store.attempts(mid)]
                       for mid, status in final.items() if status == "Suspended"}
            assert daemon.proc.poll() is None, daemon.output
    finally:
        store.dispose()

    delay = resumed - promoted
    print(f"delivery resumed {delay:.2f} s after the promotion; {len(accepted)} accepted, "
          f"{producer.refused} refused during the outage; {Counter(final.values())}; "
          f"suspended: {reasons}")
    assert delay < RESUME_WITHIN, delay
    # nothing accepted was lost: every accepted message is on the new primary, and ended
    assert ids <= set(final), sorted(ids - set(final))[:10]
    seen = Counter(r.body.decode() for r in list(server.requests))
    once = {body: n for body, n in seen.items() if body.startswith("Once-") or
            body.startswith("cli-")}
    assert [b for b, n in once.items() if n > 1] == []  # no non-idempotent request twice
    # the idempotent ones all completed; each was sent at least once
    idem = {b: mid for b, mid in accepted.items() if b.startswith("Idem-")}
    assert all(final[mid] == "Completed" for mid in idem.values()), Counter(
        final[mid] for mid in idem.values())
    assert all(seen[b] >= 1 for b in idem)
    # a non-idempotent message ends Completed, or Suspended when its attempt's outcome was
    # lost with the primary (never sent again)
    assert {final[mid] for b, mid in accepted.items() if b.startswith("Once-")} <= {
        "Completed", "Suspended"}
    assert all(any((text or "").startswith("outcome unknown") for text in texts)
               for texts in reasons.values()), reasons
    assert seen["cli-before"] == 1 and seen["cli-after"] == 1
    assert int(listening) >= 1
    # once the failover is behind it, new work is delivered at once: heard on the new
    # primary, not found by the 30 s poll
    arrived = {}
    for r in list(server.requests):
        arrived.setdefault(r.body.decode(), r.at)
    late = [(body, arrived[body] - at) for at, body in producer.accepted_at
            if at > promoted + 2]
    assert late and all(wait < 5.0 for _, wait in late), sorted(late, key=lambda x: -x[1])[:5]
    assert cli_before.returncode == 0 and cli_after.returncode == 0
    # messages were accepted on the new primary, not only before the failure
    assert any(at > promoted for at, _ in producer.accepted_at)


def test_no_connection_is_left_on_the_dead_primary_or_a_standby(
        pg_cluster: PgCluster, tmp_path: Path) -> None:
    # The standby named first, no target_session_attrs: Encore asks for the read-write
    # server itself, so writes never land on the standby.
    standby_first = (f"postgresql+psycopg://postgres@/encore?host=127.0.0.1:"
                     f"{pg_cluster.standby.port}&host=127.0.0.1:{pg_cluster.primary.port}")
    store = SqlStore(standby_first)
    try:
        store.upgrade()
        assert store.enqueue(target="A", body_class=None, body="{}") > 0
        # durable commits wait for the standby even where the server's default says not to
        off = SqlStore(standby_first + "&options=-c%20synchronous_commit%3Doff")
        with off.engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
        off.dispose()
        # connections of every kind, idle when the primary dies: SQLAlchemy's pool, the hot
        # path's durable and non-durable ones, the LISTEN one
        held = [store.engine.connect() for _ in range(4)]
        for conn in held:
            conn.exec_driver_sql("SELECT 1")
            conn.close()
        store.claim("A", owner="d", now=store.db_now(), lease_seconds=30)
        store.hear_other_processes()
        heard = threading.Event()
        store.add_reconnect_hook(heard.set)

        pg_cluster.primary.kill()
        pg_cluster.standby.promote()
        promoted = time.monotonic()
        # the first use of each kind of connection goes to the new primary: none fails
        mid = store.enqueue(target="A", body_class=None, body="{}")  # durable, hot path
        assert store.claim("A", owner="d", now=store.db_now(), lease_seconds=30)  # pool, hot
        assert store.get_message(mid) is not None
        assert store.attempts(mid) == []  # SQLAlchemy's pool
        assert heard.wait(10), "the listener never reconnected"
        assert time.monotonic() - promoted < 5
    finally:
        store.dispose()

    # the command line: every URL form, on the new primary (the dead one named first)
    forms = {"query": pg_cluster.url(),
             "comma": pg_cluster.comma_url(),
             "libpq-query": (f"postgresql://postgres@/encore?host=127.0.0.1,127.0.0.1&port="
                             f"{pg_cluster.primary.port},{pg_cluster.standby.port}")}
    for name, url in forms.items():
        lite = LiteIntake(url)  # encore send's path without SQLAlchemy: takes every form
        lite.check_schema()
        assert lite.accept(target="A", body_class=None, body=json.dumps(name)).created
        lite.dispose()
        (tmp_path / "production.toml").write_text(
            f'[production]\nname = "Forms"\ndatabase = "{url}"\n'
            '\n[[items]]\nname = "A"\nclass = "tests.acceptance.scale_hosts:SinkOperation"\n')
        sent = encore("send", "A", "--body", json.dumps({"form": name}), cwd=tmp_path)
        assert sent.stdout.strip().isdigit(), sent
        status = encore("status", cwd=tmp_path)
        assert "A" in status.stdout
    check = SqlStore(pg_cluster.comma_url())
    try:
        with check.engine.connect() as conn:
            bodies = set(conn.exec_driver_sql(
                "SELECT body FROM message_header WHERE target = 'A'").scalars())
    finally:
        check.dispose()
    values = [json.loads(b) for b in bodies]
    for name in forms:  # by LiteIntake, and by `encore send`
        assert name in values and {"form": name} in values, (name, values)
