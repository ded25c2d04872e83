"""The fault campaign's faults (bench/chaos.py): each takes the campaign, injects one
fault on a target the seed draws, undoes it and says in a few words what it did.

Freezes and partitions outlast the lease (:data:`PAST_LEASE`), so that other daemons take
the work over and the fenced writes of the one that comes back are what is tested.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench.chaos_daemons import LEASE_SECONDS
from bench.chaos_disk import flood
from bench.chaos_proxy import FaultProxy

if TYPE_CHECKING:
    from bench.chaos import Campaign

__all__ = ["FAULTS", "FAULT_ACTIONS", "PAST_LEASE"]

PAST_LEASE = LEASE_SECONDS + 1.0  # seconds a freeze or partition lasts, at least
FAULTS = ("kill9", "sigstop", "db_restart", "failover", "cut", "blackhole", "delay",
          "disk_full", "portal_flood")


def _kill9(c: Campaign) -> str:
    d = c.rng.choice(c.daemons())
    pause = c.rng.uniform(0, 0.5)
    d.kill()
    time.sleep(pause)
    d.start()
    d.wait_started()
    return f"{d.name} killed, restarted {pause:.2f} s later"


def _sigstop(c: Campaign) -> str:
    d = c.rng.choice(c.daemons())
    frozen = PAST_LEASE + c.rng.uniform(0, 1.0)
    d.stop()
    time.sleep(frozen)
    d.cont()
    return f"{d.name} frozen {frozen:.1f} s (lease {LEASE_SECONDS:g} s)"


def _db_restart(c: Campaign) -> str:
    db = c.database("postgresql")
    assert c.pg is not None
    return c.pg.restart([p for proxies in db.proxies.values() for p in proxies])


def _failover(c: Campaign) -> str:
    assert c.pg is not None
    return c.pg.failover()


def _partition(c: Campaign, how: Callable[[FaultProxy], Any], what: str,
               seconds: float) -> str:
    db = c.database("postgresql")
    d = c.rng.choice(db.daemons)
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
    what = c.disk.fill(d.pid)
    time.sleep(seconds)
    c.disk.free()
    return f"{what}, {seconds:.1f} s"


def _portal_flood(c: Campaign) -> str:
    d = c.rng.choice(c.daemons())
    return f"{d.name}'s portal: " + flood(d.portal_port, c.args.flood, 3.0)


FAULT_ACTIONS: dict[str, Callable[[Campaign], str]] = {
    "kill9": _kill9, "sigstop": _sigstop, "db_restart": _db_restart, "failover": _failover,
    "cut": _cut, "blackhole": _blackhole, "delay": _delay, "disk_full": _disk_full,
    "portal_flood": _portal_flood}
