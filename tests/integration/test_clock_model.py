"""The clock model (docs/architecture.md, "Which clock decides what"), piece by piece on real
SQLite and PostgreSQL: the daemon's clock is the database's carried on the monotonic clock,
a daemon never releases its own live claims, and on SQLite a step of the wall clock moves
the stored due times and leases once, whichever daemon sees it first."""
from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update

from engine.clock import VirtualClock, as_utc, utcnow
from engine.runtime.cluster import DatabaseClock
from engine.store.clockstep import settle_clock_frame
from engine.store.models import item_breaker, lease, message_header
from engine.store.sql import SqlStore

LEASE = 30.0


class SteppingClock(VirtualClock):
    """This host: the real monotonic clock, a wall clock the test steps."""

    def __init__(self) -> None:
        super().__init__()
        self.shift = timedelta()

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return utcnow() + self.shift


def test_a_step_of_this_hosts_wall_clock_moves_the_daemons_clock_only_on_sqlite(
        store: SqlStore) -> None:
    host = SteppingClock()
    clock = DatabaseClock(store, host)
    assert clock.sync() == 0.0
    before = clock.now()
    host.shift = timedelta(seconds=600)
    assert abs((clock.now() - before).total_seconds()) < 1  # not until the next sync
    step = clock.sync()
    if store.is_postgres:  # the server's clock decides: the host's step changes nothing
        assert step == 0.0
        assert abs((clock.now() - store.db_now()).total_seconds()) < 1
    else:  # SQLite's clock is this host's: the next sync follows it, and says so
        assert abs(step - 600) < 1
        assert abs((clock.now() - host.now()).total_seconds()) < 1


def test_a_daemon_never_releases_its_own_live_claims(store: SqlStore) -> None:
    now = utcnow()
    mine, orphan, theirs = (store.enqueue(target="A", body_class=None, body="{}", now=now)
                            for _ in range(3))
    store.claim("A", owner="me", now=now, lease_seconds=1, limit=2)
    store.claim("A", owner="them", now=now, lease_seconds=1, limit=1)
    later = now + timedelta(seconds=60)  # every lease has expired on this clock
    # its own claim that it holds stays; its own it does not hold (a claim whose commit it
    # never heard of) and another daemon's expired claim go back to the queue
    assert store.release_expired_claims("A", now=later, owner="me", holding=[mine]) == 2
    statuses = {m: store.get_message(m).status for m in (mine, orphan, theirs)}
    assert statuses == {mine: "Delivered", orphan: "Queued", theirs: "Queued"}
    assert store.release_expired_claims("A", now=later, owner="other") == 1  # judged by others


@pytest.fixture
def sqlite_store(tmp_path: object) -> SqlStore:
    s = SqlStore(f"sqlite:///{tmp_path}/clock.db")  # type: ignore[str-bytes-safe]
    s.upgrade()
    yield s  # type: ignore[misc]
    s.dispose()


def times(store: SqlStore, mid: int) -> tuple[datetime | None, ...]:
    h = message_header.c
    with store.engine.connect() as conn:
        row = conn.execute(select(h.next_attempt_at, h.first_attempt_at, h.lease_expires_at)
                           .where(h.id == mid)).one()
    return tuple(as_utc(v) for v in row)


def test_a_step_moves_the_stored_due_times_once_and_never_shortens_a_lease(
        sqlite_store: SqlStore) -> None:
    store, now = sqlite_store, utcnow()
    parked = store.enqueue(target="A", body_class=None, body="{}", now=now)
    claimed = store.enqueue(target="A", body_class=None, body="{}", now=now)
    with store.engine.begin() as conn:
        conn.execute(update(message_header).where(message_header.c.id == parked).values(
            retry_needed=True, next_attempt_at=now + timedelta(seconds=20),
            first_attempt_at=now - timedelta(seconds=5)))
        conn.execute(item_breaker.insert().values(config_name="A", state="open", failures=3,
                                                  open_until=now + timedelta(seconds=9),
                                                  updated_at=now))
    store.claim("A", owner="me", now=now, lease_seconds=LEASE, limit=5)
    store.leases.acquire("leader", "me", now=now, lease_seconds=LEASE)
    store.register_daemon("me", host="h", pid=1, production="P", items="A", now=now)
    zero = now - timedelta(hours=1)
    assert settle_clock_frame(store, boot="b", zero_at=zero, tolerance=1,
                              lease_seconds=LEASE) == (0.0, {})  # the first daemon's record
    parked_before, claimed_before = times(store, parked), times(store, claimed)

    step, moved = settle_clock_frame(store, boot="b", zero_at=zero + timedelta(seconds=600),
                                     tolerance=1, lease_seconds=LEASE)
    assert step == 600
    assert moved == {"retries": 1, "first attempts": 1, "claims": 1, "leases": 1,
                     "heartbeats": 1, "breakers": 1}
    ten = timedelta(seconds=600)
    assert times(store, parked)[:2] == (parked_before[0] + ten, parked_before[1] + ten)
    assert times(store, claimed)[2] == claimed_before[2] + ten
    # a second daemon reading the same step finds it carried: nothing moves twice
    assert settle_clock_frame(store, boot="b", zero_at=zero + timedelta(seconds=600.3),
                              tolerance=1, lease_seconds=LEASE) == (0.0, {})
    assert times(store, parked)[:2] == (parked_before[0] + ten, parked_before[1] + ten)

    # back: due times follow it; a lease keeps its later end until its owner renews it
    step, moved = settle_clock_frame(store, boot="b", zero_at=zero, tolerance=1,
                                     lease_seconds=LEASE)
    assert step == -600 and moved["claims"] == moved["leases"] == moved["heartbeats"] == 0
    assert times(store, parked)[:2] == parked_before[:2]
    assert times(store, claimed)[2] == claimed_before[2] + ten
    with store.engine.connect() as conn:
        (until,) = conn.execute(select(lease.c.expires_at)).one()
        (breaker_until,) = conn.execute(select(item_breaker.c.open_until)).one()
    assert as_utc(until) == now + timedelta(seconds=LEASE) + ten
    assert as_utc(breaker_until) == now + timedelta(seconds=9)
    # a new boot: a new origin of the monotonic clock, nothing to compare with
    assert settle_clock_frame(store, boot="c", zero_at=zero + timedelta(days=1), tolerance=1,
                              lease_seconds=LEASE) == (0.0, {})


def test_an_expiry_scan_on_sqlite_judges_leases_on_the_files_clock_frame(
        sqlite_store: SqlStore) -> None:
    """A daemon whose clock has not yet seen a step never takes a live claim that another
    daemon moved across it for expired."""
    store, now = sqlite_store, utcnow()
    mid = store.enqueue(target="A", body_class=None, body="{}", now=now)
    store.claim("A", owner="stepped", now=now, lease_seconds=LEASE)
    mono = time.monotonic()
    settle_clock_frame(store, boot="b", zero_at=now - timedelta(seconds=mono), tolerance=1,
                       lease_seconds=LEASE)
    stale = now + timedelta(seconds=600)  # the other daemon's clock, a step ahead
    assert store.release_expired_claims("A", now=stale, owner="other",
                                        monotonic=time.monotonic()) == 0
    assert store.get_message(mid).status == "Delivered"
    assert store.release_expired_claims("A", now=stale, owner="other") == 1  # without it


class StallingClock(VirtualClock):
    """This host: the real wall clock, a monotonic clock the test moves — by ``stall``
    seconds within the next reading of the database's clock, as when that reading is held
    up (a partition, a frozen server) and arrives seconds after it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.at = 1000.0
        self.stall = 0.0
        self.calls = 0

    def monotonic(self) -> float:
        self.calls += 1
        value = self.at
        if self.stall and self.calls % 2 == 1:  # the reading is asked for: it is held up
            self.at += self.stall
            self.stall = 0.0
        return value

    def now(self) -> datetime:
        return utcnow()


def test_a_reading_held_up_for_seconds_never_moves_the_daemons_clock(store: SqlStore) -> None:
    host = StallingClock()
    clock = DatabaseClock(store, host)
    assert clock.sync() == 0.0
    before = clock.now()
    # the reading took 3 s by this host's clock: it bounds the database's time only within
    # those 3 s, and this clock is within them, so it stays (credited half the wait, it
    # would move 1.5 s, and a daemon ahead judges other daemons' leases expired early)
    host.calls, host.stall = 0, 3.0
    assert clock.sync() == 0.0
    host.at -= 3.0  # the same monotonic instant as ``before``
    assert abs((clock.now() - before).total_seconds()) < 0.1
    # a prompt reading outside the bounds moves it, as far as the reading says
    host.at += 3.0 + 2.0  # 5 s of this host's monotonic time, the database's clock still
    # (the database's clock runs on in real time meanwhile: a loaded machine's few hundred ms)
    assert clock.sync() == pytest.approx(-5.0, abs=1.0)
    assert abs((clock.now() - store.db_now()).total_seconds()) < 1.0


def test_the_expiry_scan_skips_a_claim_locked_by_a_frozen_writer_and_never_waits(
        pg_store: SqlStore) -> None:
    # a daemon frozen between a write of its claimed message and its COMMIT holds the row's
    # lock until the server ends its session: another daemon's scan must neither wait for
    # it (its dispatcher, and every scan queued behind, would stall) nor release it
    now = utcnow()
    locked, free = (pg_store.enqueue(target="A", body_class=None, body="{}", now=now)
                    for _ in range(2))
    pg_store.claim("A", owner="frozen", now=now, lease_seconds=1, limit=2)
    later = now + timedelta(seconds=60)
    with pg_store.engine.connect() as frozen:
        frozen.execute(update(message_header).where(message_header.c.id == locked)
                       .values(retry_needed=True))  # its transaction stays open
        started = time.monotonic()
        assert pg_store.release_expired_claims("A", now=later, owner="other") == 1
        assert time.monotonic() - started < 5  # it would wait as long as the lock is held
        frozen.rollback()
    assert pg_store.get_message(free).status == "Queued"
    assert pg_store.get_message(locked).status == "Delivered"
    assert pg_store.release_expired_claims("A", now=later, owner="other") == 1  # next scan
