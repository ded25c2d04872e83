"""The fault campaign's faults (bench/chaos.py): each takes the campaign, injects one
fault on a target the seed draws, undoes it and says in a few words what it did.

Freezes and partitions outlast the lease (:data:`PAST_LEASE`), so that other daemons take
the work over and the fenced writes of the one that comes back are what is tested.

Each fault names the daemons it touches (:meth:`Campaign.touch`; a database restart
touches them all): only those may lose claims in its window (the ``claim_stolen``
invariant). Hostile XML touches none — a document within the limits must not stall a
daemon, and one beyond them must be refused before it can.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench.chaos_clock import STEP_SECONDS
from bench.chaos_daemons import LEASE_SECONDS, Daemon, stall_item
from bench.chaos_disk import flood
from bench.chaos_proxy import FaultProxy
from bench.chaos_stall import marker
from bench.chaos_xml import OVER, OVER_MARK, UNDER, UNDER_MARK, Probe, envelope, post
from engine.client import send_message
from engine.config.production import load_production
from engine.store.sql import SqlStore

if TYPE_CHECKING:
    from bench.chaos import Campaign

__all__ = ["FAULTS", "FAULT_ACTIONS", "PAST_LEASE"]

PAST_LEASE = LEASE_SECONDS + 1.0  # seconds a freeze or partition lasts, at least
FAULTS = ("kill9", "sigstop", "db_restart", "failover", "cut", "blackhole", "delay",
          "disk_full", "portal_flood", "clock_step", "live_stall", "hostile_xml")
STALL_WAIT = 30.0  # seconds a stall may take to begin (its message delivered) and to end
_numbers = itertools.count(1)  # tells the stalls and hostile messages of a run apart


def _kill9(c: Campaign) -> str:
    d = c.rng.choice(c.daemons())
    pause = c.rng.uniform(0, 0.5)
    c.touch(d)
    d.kill()
    time.sleep(pause)
    d.start()
    d.wait_started()
    return f"{d.name} killed, restarted {pause:.2f} s later"


def _sigstop(c: Campaign) -> str:
    d = c.rng.choice(c.daemons())
    frozen = PAST_LEASE + c.rng.uniform(0, 1.0)
    c.touch(d)
    d.stop()
    time.sleep(frozen)
    d.cont()
    return f"{d.name} frozen {frozen:.1f} s (lease {LEASE_SECONDS:g} s)"


def _db_restart(c: Campaign) -> str:
    db = c.database("postgresql")
    assert c.pg is not None
    c.touch(*db.daemons)
    return c.pg.restart([p for proxies in db.proxies.values() for p in proxies])


def _failover(c: Campaign) -> str:
    assert c.pg is not None
    c.touch(*c.database("postgresql").daemons)
    return c.pg.failover()


def _partition(c: Campaign, how: Callable[[FaultProxy], Any], what: str,
               seconds: float) -> str:
    db = c.database("postgresql")
    d = c.rng.choice(db.daemons)
    c.touch(d)
    proxies = db.proxies[d.name]
    for proxy in proxies:
        how(proxy)
    time.sleep(seconds)
    for proxy in proxies:
        proxy.heal()
    return f"{d.name}'s database connections {what} {seconds:.1f} s"


def _cut(c: Campaign) -> str:
    seconds = PAST_LEASE + c.rng.uniform(0, 1.0)
    return _partition(c, lambda p: p.cut(refuse_for=seconds), "cut, refused", seconds)


def _blackhole(c: Campaign) -> str:
    seconds = PAST_LEASE + c.rng.uniform(0, 1.0)
    return _partition(c, FaultProxy.blackhole, "blackholed", seconds)


def _delay(c: Campaign) -> str:
    lag = c.rng.choice((0.05, 0.2, 0.5))
    return _partition(c, lambda p: p.delay(lag), f"delayed {lag:g} s per chunk", 3.0)


def _disk_full(c: Campaign) -> str:
    assert c.disk is not None
    d = c.database("sqlite").daemons[0]
    seconds = 1.0 + c.rng.uniform(0, 2.0)
    c.touch(d)
    what = c.disk.fill(d.pid)
    time.sleep(seconds)
    c.disk.free()
    return f"{what}, {seconds:.1f} s"


def _portal_flood(c: Campaign) -> str:
    d = c.rng.choice(c.daemons())
    c.touch(d)
    return f"{d.name}'s portal: " + flood(d.portal_port, c.args.flood, 3.0)


def _clock_step(c: Campaign) -> str:
    """One daemon's wall clock 10 minutes ahead or behind for 3–4 s (a lease and more:
    time for its heartbeats, claims and reaping to act on it), then right again."""
    d = c.rng.choice(c.daemons())
    step = c.rng.choice((STEP_SECONDS, -STEP_SECONDS))
    seconds = PAST_LEASE + c.rng.uniform(0, 1.0)
    c.touch(d, offset=step)
    d.clock_file.write_text(f"{step:+.0f}\n")
    try:
        time.sleep(seconds)
    finally:
        d.clock_file.write_text("+0\n")
    time.sleep(1.0)  # libfaketime reads the file again within a second
    return f"{d.name}'s wall clock {step:+.0f} s for {seconds:.1f} s"


def _send(c: Campaign, d: Daemon, item: str, body: dict[str, Any]) -> int:
    """A message to ``item`` in ``d``'s database, sent directly (not through a proxy)."""
    db = c.database_of(d)
    store = SqlStore(db.url)
    try:
        return send_message(store, load_production(d.production), item, body, source="chaos")
    finally:
        store.dispose()


def _live_stall(c: Campaign) -> str:
    """One daemon's interpreter held for 3–4 s (past the lease) by a message of its own
    Stall item (bench/chaos_stall.py): alive, its sockets accepting, nothing running."""
    d = c.rng.choice(c.daemons())
    seconds = PAST_LEASE + c.rng.uniform(0, 1.0)
    stall = f"{d.name}-{next(_numbers)}"
    c.touch(d)
    _send(c, d, stall_item(d.name), {"stall": stall, "seconds": seconds})
    begun, ended = (marker(d.directory, stall, s) for s in ("begun", "ended"))
    deadline = time.monotonic() + STALL_WAIT
    while not ended.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not begun.exists():
        return f"{d.name}: its stall message was not delivered in {STALL_WAIT:g} s"
    return f"{d.name}'s interpreter held {seconds:.1f} s (lease {LEASE_SECONDS:g} s)"


def _hostile_xml(c: Campaign) -> str:
    """SOAP documents of 255 and 40,000 attributes on one element, in to one daemon's
    SoapService (its portal probed meanwhile) and out as answers to two Soap messages."""
    d = c.rng.choice(c.daemons())
    db = c.database_of(d)
    assert db.producer is not None
    n = next(_numbers)
    for mark in (UNDER_MARK, OVER_MARK):
        tag = f"{db.producer.prefix}:Soap:{n}{mark}"
        mid = _send(c, d, "Soap", {"operation": "echo", "args": {"text": tag}})
        db.producer.accepted[tag] = mid
    with Probe(d.portal_port) as probe:
        under = post(d.inbound_port, envelope(UNDER, f"in-{n}"))
        over = post(d.inbound_port, envelope(OVER, f"in-{n}"))
        time.sleep(1.0)
    c.xml_calls.append((db.name, d.name, probe.worst, under, over))
    return (f"{d.name}'s SoapService: {UNDER} attributes {under[0]} in {under[1]:.2f} s, "
            f"{OVER} {over[0]} in {over[1]:.2f} s; slowest portal answer "
            f"{probe.worst:.2f} s; 2 Soap answers of as many attributes")


FAULT_ACTIONS: dict[str, Callable[[Campaign], str]] = {
    "kill9": _kill9, "sigstop": _sigstop, "db_restart": _db_restart, "failover": _failover,
    "cut": _cut, "blackhole": _blackhole, "delay": _delay, "disk_full": _disk_full,
    "portal_flood": _portal_flood, "clock_step": _clock_step, "live_stall": _live_stall,
    "hostile_xml": _hostile_xml}
