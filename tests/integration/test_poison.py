"""Poison messages end (issue 22, point 2; docs/architecture.md "Poison messages"), exactly, on the
virtual clock and on every database.

A delivery that never ends counts against its message: here a "crash" is an exception that
no part of the engine catches (as a kill -9 leaves the database: the message claimed, its
attempt open), after which the test starts a new daemon on the same database once the dead
one's lease has expired. After ``max_deliveries`` such deliveries the message is
``Suspended`` with an event that says so, whatever its failure timeout; deliveries that end
normally (a retry that parks the message, a graceful stop that releases it) do not count;
messages claimed with a poison message, or behind it, are not suspended with it."""
from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine import BusinessOperation, Retry
from engine.delivery.dispatch import FIRST_BATCH
from engine.delivery.worker import CRASH_TEXT, poison_text
from engine.message import JsonMessage
from engine.store import queries
from engine.store.sql import SqlStore
from engine.testing import VirtualDaemon

LEASE = 10.0  # seconds: lease_seconds of these productions
LIFE = LEASE + 1  # a new daemon starts this long after the last one started (and died)
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Crash(BaseException):
    """What a kill -9 is to the daemon: nothing catches it, nothing after it runs."""


class Poisonable(BusinessOperation):
    """Crashes its daemon on a body {"crash": true}; fails the first ``fails`` attempts of
    a body {"fails": N} (parks them in requeue mode); asks its item to stop, then fails, on
    the first ``stops`` attempts of a body {"stops": N} (a graceful stop in a blocking
    retry's wait); every attempt takes one virtual second."""

    request_class = JsonMessage
    harness: VirtualDaemon | None = None

    def on_message(self, request: Any) -> Any:
        assert self.harness is not None
        self.harness.clock.advance(1.0)
        if request.data.get("crash"):
            raise Crash()
        if self.retry_count <= request.data.get("fails", 0):
            raise Retry(f"attempt {self.retry_count} refused")
        if self.retry_count <= request.data.get("stops", 0):
            self.harness.daemon.runners["Item"].request_stop()
            raise Retry("stopping")
        return {"ok": self.retry_count}


def events(store: SqlStore, mid: int) -> list[tuple[str, str]]:
    return [(e["type"], e["text"]) for e in
            queries.events(store, queries.EventFilter(message_id=mid))]


def deliveries(store: SqlStore, mid: int) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql(
            f"SELECT deliveries FROM message_header WHERE id = {int(mid)}").scalar_one())


def run_lives(store: SqlStore, settings: dict[str, Any], bodies: list[dict[str, Any]], *,
              pool_size: int = 1, crashes: int) -> list[int]:
    """Send ``bodies``, then run daemon after daemon — each started LIFE seconds after the
    last — until one runs every message to its end; returns the ids. Exactly ``crashes``
    daemons must crash before that."""
    first = VirtualDaemon.for_item("Item", Poisonable, settings, store=store,
                                   poll_interval=100.0, lease_seconds=LEASE)
    config = first.production
    config = dataclasses.replace(config, items=tuple(
        dataclasses.replace(item, pool_size=pool_size) for item in config.items))
    first.daemon.stop()
    ids = [first.send("Item", body) for body in bodies]
    crashed = 0
    for n in range(crashes + 1):
        vd = VirtualDaemon(config, store, start=START + timedelta(seconds=n * LIFE))
        for runner in vd.daemon.runners.values():
            for host in runner.hosts:
                host.harness = vd  # type: ignore[attr-defined]
        try:
            vd.run()
        except Crash:
            crashed += 1  # the daemon is dead: nothing of it runs again
            continue
        vd.stop()
        break
    assert crashed == crashes
    return ids


@pytest.mark.parametrize("pool_size", [1, 3])
def test_a_message_that_crashes_its_daemon_is_suspended_after_max_deliveries(
        store: SqlStore, pool_size: int) -> None:
    # failure_timeout = -1: retrying for ever would never end it
    settings = {"max_deliveries": 3, "failure_timeout": -1, "retry_interval": 1}
    poison, *innocent = run_lives(store, settings,
                                  [{"crash": True}] + [{"fails": 0}] * 4,
                                  pool_size=pool_size, crashes=3)
    row = store.get_message(poison)
    assert row.status == "Suspended"
    assert row.error_text == poison_text(3, 3)
    assert row.error_text.startswith(
        "delivery interrupted 3 times: the message may crash or freeze its daemon")
    # one attempt per life, each cut short at the crash and ended by the next daemon
    attempts = [(a.attempt, START + timedelta(seconds=(a.attempt - 1) * LIFE) == a.started_at,
                 a.error_text) for a in store.attempts(poison)]
    assert attempts == [(1, True, CRASH_TEXT), (2, True, CRASH_TEXT), (3, True, CRASH_TEXT)]
    assert [a.ended_at for a in store.attempts(poison)] == [
        START + timedelta(seconds=n * LIFE) for n in (1, 2, 3)]
    assert events(store, poison) == [("Error", f"attempt 1 failed: {CRASH_TEXT}"),
                                     ("Warning", poison_text(3, 3))]
    # the messages claimed with it in the first life (never started) and behind it: each
    # counted once for that first claim and once for its own delivery, never suspended
    assert [store.get_message(m).status for m in innocent] == ["Completed"] * 4
    first_claimed = [store.get_message(m).time_processed == START for m in innocent]
    batch = FIRST_BATCH if pool_size == 1 else pool_size  # the first life's one claim
    assert first_claimed == [True] * (batch - 1) + [False] * (5 - batch)
    assert [deliveries(store, m) for m in innocent] == [2 if f else 1 for f in first_claimed]
    assert deliveries(store, poison) == 4  # 3 interrupted, and the one that suspended it


def test_the_poison_message_is_suspended_when_its_limit_is_the_default(
        store: SqlStore) -> None:
    (poison,) = run_lives(store, {"failure_timeout": -1, "retry_interval": 1},
                          [{"crash": True}], crashes=5)
    assert store.get_message(poison).status == "Suspended"
    assert store.get_message(poison).error_text.startswith(
        "delivery interrupted 5 times: the message may crash or freeze its daemon")
    assert len(store.attempts(poison)) == 5


def test_retries_that_park_the_message_do_not_count(store: SqlStore) -> None:
    # requeue mode: each failed attempt ends the delivery (the message parks), 6 of them
    (mid,) = run_lives(store, {"max_deliveries": 2, "failure_timeout": -1,
                               "retry_interval": 5, "retry_mode": "requeue"},
                       [{"fails": 6}], crashes=0)
    row = store.get_message(mid)
    assert row.status == "Completed" and row.attempts == 7
    assert deliveries(store, mid) == 1  # only the last one, which completed it


def test_graceful_stops_that_release_the_message_do_not_count(store: SqlStore) -> None:
    settings = {"max_deliveries": 2, "failure_timeout": -1, "retry_interval": 5}
    first = VirtualDaemon.for_item("Item", Poisonable, settings, store=store,
                                   poll_interval=100.0, lease_seconds=LEASE)
    config = first.production
    first.daemon.stop()
    mid = first.send("Item", {"stops": 4})
    results = []
    for n in range(5):  # a stop in the wait after each of the first 4 attempts
        vd = VirtualDaemon(config, store, start=START + timedelta(seconds=n * LIFE))
        for host in vd.daemon.runners["Item"].hosts:
            host.harness = vd  # type: ignore[attr-defined]
        vd.tick()  # one claim, one delivery: to its end, or to the stop in its wait
        results.append([r.value for _, r in vd.deliveries])
        assert vd.stop()
    assert results == [["Released"]] * 4 + [["Completed"]]
    assert store.get_message(mid).status == "Completed"
    assert deliveries(store, mid) == 1


def test_a_suspect_is_claimed_alone_and_only_by_a_claimer_that_holds_nothing_else(
        store: SqlStore) -> None:
    now = START
    ids = [store.enqueue(target="A", body_class=None, body="{}", now=now) for _ in range(5)]

    def claim(owner: str, *, limit: int = 10, alone: bool = True, at: float = 0.0,
              fifo: bool = False) -> list[tuple[int, int]]:
        when = now + timedelta(seconds=at)
        store.release_expired_claims("A", now=when)
        return [(c.row.id, c.interrupted) for c in store.claim(
            "A", owner=owner, now=when, lease_seconds=LEASE, limit=limit, alone=alone,
            fifo=fifo)]

    assert claim("dies", limit=2) == [(ids[0], 0), (ids[1], 0)]  # fresh: counted by the claim
    # its lease expires: both are suspects now, and come one at a time, to a claimer alone
    assert claim("b", alone=False, at=LIFE) == []
    assert claim("b", alone=False, at=LIFE, fifo=True) == []
    assert claim("b", at=LIFE) == [(ids[0], 1)]
    assert claim("c", at=LIFE) == [(ids[1], 1)]
    # then the fresh messages, in a batch
    assert claim("d", at=LIFE) == [(ids[2], 0), (ids[3], 0), (ids[4], 0)]
    # a graceful release takes its delivery back; a database error's abandonment does not
    b = store.get_message(ids[0])
    store.release(ids[0], token=b.claim_token)
    assert deliveries(store, ids[0]) == 1
    store.release_claim(ids[1], "c")
    assert deliveries(store, ids[1]) == 2
    # fresh messages before a suspect are claimed together; the suspect stays for later
    later = store.enqueue(target="B", body_class=None, body="{}", now=now)
    store.claim("B", owner="dies", now=now, lease_seconds=LEASE)
    store.release_claims("dies")
    fresh = store.enqueue(target="B", body_class=None, body="{}", now=now)
    assert [c.row.id for c in store.claim("B", owner="e", now=now, lease_seconds=LEASE,
                                          limit=5, alone=False)] == []
    assert [c.row.id for c in store.claim("B", owner="e", now=now, lease_seconds=LEASE,
                                          limit=5)] == [later]
    assert [c.row.id for c in store.claim("B", owner="f", now=now, lease_seconds=LEASE,
                                          limit=5, alone=False)] == [fresh]
