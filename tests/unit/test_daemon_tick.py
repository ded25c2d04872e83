"""Daemon.step() on a virtual clock (VirtualDaemon.tick): what it does when, and the wake-up
it returns."""
from __future__ import annotations

from typing import Any

from engine.delivery.dispatch import CLAIM_LINGER
from engine.settings import validate_settings
from engine.store import queries
from engine.testing import (
    ServerBehaviour,
    SimulatedOperation,
    SimulatedServerAdapter,
    VirtualDaemon,
)

SEED = {"response_timeout": 7, "retry_interval": 10, "failure_timeout": 30}
QUIET = {"poll_interval": 100.0}  # seconds: idle dispatchers never set the next wake-up


def item(settings: dict[str, Any], delay: float, lease_seconds: float) -> VirtualDaemon:
    """One SimulatedOperation item whose server answers after ``delay`` seconds."""
    clean = validate_settings("Item", settings, SimulatedOperation.declared_settings())
    return VirtualDaemon.for_item(
        "Item", SimulatedOperation, clean, lease_seconds=lease_seconds, **QUIET,
        adapter=lambda clock: SimulatedServerAdapter(
            clean, behaviour=ServerBehaviour(delay=delay), clock=clock))


def seed_item(**settings: Any) -> VirtualDaemon:
    """The seed item, with heartbeats every 30 s (not to coincide with the attempts)."""
    return item({**SEED, **settings}, delay=8, lease_seconds=90.0)


def heartbeat_at(vd: VirtualDaemon) -> float:
    (row,) = queries.daemons(vd.store)
    return vd.at(row["heartbeat_at"])


def test_an_idle_daemon_wakes_for_its_next_heartbeat() -> None:
    vd = item(SEED, delay=0, lease_seconds=30.0)
    assert vd.tick() == 10  # lease_seconds / 3
    vd.clock.advance(4)
    assert vd.tick() == 6
    vd.clock.advance(6)
    assert vd.tick() == 10
    assert heartbeat_at(vd) == 10
    vd.stop()


def test_a_parked_message_sets_the_wake_up_to_its_next_attempt() -> None:
    vd = seed_item(retry_mode="requeue")
    mid = vd.send("Item", {})
    assert vd.tick() == 0  # attempt 1 delivered (0 to 7): look again at once
    assert vd.clock.monotonic() == 7
    assert vd.tick() == 3  # attempt 2 is due at 10, before the heartbeat at 30
    vd.run()
    attempts = vd.store.attempts(mid)
    assert [(vd.at(a.started_at), vd.at(a.ended_at)) for a in attempts] == [
        (0, 7), (10, 17), (20, 27), (30, 37)]
    vd.stop()


def test_the_seed_timeline_holds_exactly_through_the_ticked_daemon() -> None:
    for mode in ("blocking", "requeue"):  # the worker waits, or the dispatcher re-claims
        vd = seed_item(retry_mode=mode)
        mid = vd.send("Item", {})
        vd.run()
        row = vd.store.get_message(mid)
        assert [(vd.at(a.started_at), vd.at(a.ended_at), a.outcome)
                for a in vd.store.attempts(mid)] == [
            (0, 7, "timeout"), (10, 17, "timeout"), (20, 27, "timeout"), (30, 37, "timeout")]
        assert (row.status, row.attempts, vd.at(row.time_completed)) == ("Error", 4, 37)
        errors = queries.events(vd.store, queries.EventFilter(type="Error", message_id=mid))
        assert len(errors) == 2
        assert "attempt 1 failed" in errors[0]["text"]
        assert "FailureTimeout of 30 seconds exceeded" in errors[1]["text"]
        assert vd.hosts["Item"].adapter.total_requests == 4
        vd.stop()


def test_heartbeats_go_on_during_a_blocking_retry_wait() -> None:
    vd = seed_item()  # blocking: the worker sleeps 3 s between attempts, ticking the daemon
    vd.send("Item", {})
    vd.run()
    assert heartbeat_at(vd) == 30  # beat at 30 although one delivery ran from 0 to 37
    vd.stop()


def test_the_claim_linger_never_shifts_a_virtual_timeline() -> None:
    # the second message arrives within CLAIM_LINGER of the claim that emptied the queue: a
    # threaded dispatcher waits to claim more at once; the ticked one claims it when due
    assert CLAIM_LINGER > 0.002
    vd = item(SEED, delay=0.001, lease_seconds=30.0)
    first = vd.send("Item", {})
    vd.run()
    vd.clock.advance(0.001)
    second = vd.send("Item", {})
    vd.run()
    assert [(vd.at(a.started_at), vd.at(a.ended_at)) for m in (first, second)
            for a in vd.store.attempts(m)] == [(0, 0.001), (0.002, 0.003)]
    vd.stop()
