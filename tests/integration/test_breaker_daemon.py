"""The circuit breaker inside a daemon, on SQLite and PostgreSQL (docs/guards.md): a FIFO item
keeps its order through an outage, a requeue item's parked messages wait for the probe, and
the metrics follow the breaker."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from engine.client import send_message
from engine.config.production import ProductionConfig, parse_production
from engine.runtime.daemon import Daemon
from engine.store import queries
from engine.store.sql import SqlStore
from tests.servers import HttpTestServer, Recorded, _Handler, respond
from tests.waiting import wait_until

OUTAGE = 1.5  # seconds the server answers 503
OPEN_SECONDS = 2.0  # breaker_open_seconds, longer than the outage: one probe closes it


class Outage:
    """Answers 503 for ``seconds`` after :meth:`start`, then 200."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.until = seconds, float("inf")
        self._down, self._up = respond(503, "down"), respond(200, "ok")

    def start(self) -> None:
        self.until = time.monotonic() + self.seconds

    def __call__(self, handler: _Handler, record: Recorded) -> None:
        (self._down if record.at < self.until else self._up)(handler, record)


@contextmanager
def running(store: SqlStore, url: str, *, pool: int, mode: str) -> Iterator[Daemon]:
    production = parse_production(
        f'[production]\npoll_interval = 0.1\n[[items]]\nname = "Pay"\n'
        f'class = "operations.http:HttpOperation"\npool_size = {pool}\n[items.settings]\n'
        f'url = "{url}"\nretry_interval = 0.2\nfailure_timeout = 60\nretry_mode = "{mode}"\n'
        f"breaker_threshold = 2\nbreaker_open_seconds = {OPEN_SECONDS}\n", env={})
    daemon = Daemon(production, store=store, env={})
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def send_all(store: SqlStore, daemon: Daemon, n: int) -> list[int]:
    production: ProductionConfig = daemon.production
    return [send_message(store, production, "Pay",
                         {"method": "POST", "path": "/", "body": f"m{i:02d}"})
            for i in range(n)]


def completed(store: SqlStore, ids: list[int]) -> bool:
    return all(store.get_message(i).status == "Completed" for i in ids)  # type: ignore[union-attr]


def breaker_events(store: SqlStore) -> list[str]:
    return [e["type"] for e in queries.events(store, queries.EventFilter(item="Pay"))
            if e["source_class"] == "CircuitBreaker"]


@pytest.mark.parametrize("mode", ["blocking", "requeue"])
def test_an_outage_opens_the_breaker_once_and_the_queue_resumes_after_one_probe(
        store: SqlStore, mode: str) -> None:
    outage = Outage(OUTAGE)
    with HttpTestServer({"/": outage}) as server:
        pool = 1 if mode == "blocking" else 3  # pool 1, blocking: a FIFO item
        with running(store, server.url, pool=pool, mode=mode) as daemon:
            outage.start()
            ids = send_all(store, daemon, 6)
            wait_until(lambda: breaker_events(store), 10, "the breaker to open")
            wait_until(lambda: 'encore_breaker_open{item="Pay"} 1' in daemon.metrics.render(),
                       5, "the metric to show the breaker open")
            during = len(server.requests)
            time.sleep(OUTAGE - 0.3)
            assert len(server.requests) == during  # nothing is sent while it is open
            wait_until(lambda: completed(store, ids), 20, "every message to complete")
            assert 'encore_breaker_open{item="Pay"} 0' in daemon.metrics.render()
    assert breaker_events(store) == ["Warning", "Info"]
    after = [r.body.decode() for r in server.requests if r.at >= outage.until]
    assert sorted(after) == [f"m{i:02d}" for i in range(6)]  # each once, none lost
    if mode == "blocking":  # FIFO: the queue resumes in send order, the probe first
        assert after == [f"m{i:02d}" for i in range(6)]
