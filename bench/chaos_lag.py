"""Late heartbeats, as the fault campaign sees them in the database: a thread per database
reads every daemon's ``heartbeat_at`` every :data:`EVERY` seconds and notes each time a
daemon's heartbeat is older than the lease — its claims may expire, for whatever reason
(a fault the campaign injected, or the machine starving it: with a 2 s lease, a load
average of 20 on 2 cores can). A claim lost by a daemon whose heartbeat stayed fresh was
taken early: what a stepped clock did (issue 36 finding 2). The spells are counted in the
campaign's table; with ``--excuse-late-heartbeats`` each is also a window of that daemon
(bench/chaos_checker.py ``claim_stolen``) — for a machine so loaded that leases expire
by themselves. Not by default: a stepped clock also makes healthy daemons' heartbeats look
late (it reaps their rows), and the invariant must not forgive it then.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.engine import Connection

from engine.clock import as_utc, utcnow
from engine.store.models import daemon
from engine.store.sql import SqlStore

__all__ = ["HeartbeatWatch"]

EVERY = 0.25  # seconds between two looks


class HeartbeatWatch:
    """Watches the daemons of database ``url``; ``names()`` maps live pids to daemon
    names. :attr:`late` is {name: [(start, end) epoch seconds]}."""

    def __init__(self, url: str, names: Callable[[], dict[int, str]], lease: float) -> None:
        self.url = url
        self.names = names
        self.lease = lease
        self.late: dict[str, list[tuple[float, float]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="chaos-beats")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        store = SqlStore(self.url)
        try:
            while not self._stop.wait(EVERY):
                try:
                    self._look(store)
                except Exception:  # the database is away: a fault of its own
                    pass
        finally:
            store.dispose()

    def _look(self, store: SqlStore) -> None:
        names = self.names()
        with store.engine.connect() as conn:
            rows = conn.execute(select(daemon.c.pid, daemon.c.heartbeat_at)).all()
            now = _now(conn) if store.engine.dialect.name == "postgresql" else utcnow()
        for row in rows:
            name, beat = names.get(int(row.pid)), as_utc(row.heartbeat_at)
            if name is None or beat is None or (now - beat).total_seconds() <= self.lease:
                continue
            spells = self.late.setdefault(name, [])
            start, end = beat.timestamp(), now.timestamp()
            if spells and spells[-1][1] >= start - EVERY * 2:
                spells[-1] = (min(spells[-1][0], start), end)
            else:
                spells.append((start, end))

    def counts(self) -> dict[str, dict[str, float]]:
        """{name: {"spells": n, "longest_s": s}} of the daemons that were late."""
        return {name: {"spells": len(spells),
                       "longest_s": round(max(e - s for s, e in spells), 1)}
                for name, spells in sorted(self.late.items())}


def _now(conn: Connection) -> datetime:
    value = as_utc(conn.execute(text("SELECT clock_timestamp()")).scalar_one())
    assert value is not None
    return value
