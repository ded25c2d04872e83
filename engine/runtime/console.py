"""What a daemon reports for the operator's console (docs/portal.md): ``daemon.items`` and
``daemon.item_states`` when they change, and the items' per-minute counters every couple of seconds.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Protocol

from engine.clock import Clock
from engine.config.production import ItemConfig
from engine.delivery.item import ItemRunner
from engine.store import rollup, running
from engine.store.sql import SqlStore


class ReloadState(Protocol):
    """What the console reports of the daemon's reloader."""

    @property
    def refused(self) -> Mapping[str, str]: ...

    @property
    def failed(self) -> Mapping[str, str]: ...

    @property
    def file_hash(self) -> str | None: ...

ROLLUP_PRUNE_INTERVAL = 3600.0  # seconds between the leader's deletions of old rollup rows


class ConsoleReport:
    """The console's view of daemon ``daemon_id``: its runners, refusals and counters."""

    def __init__(self, store: SqlStore, clock: Clock, daemon_id: str, *,
                 runners: Mapping[str, ItemRunner], reloader: ReloadState,
                 items: Callable[[], list[ItemConfig]], leader: Callable[[], bool],
                 inbound: Callable[[], Iterable[str]] = tuple) -> None:
        self.store = store
        self.clock = clock
        self.daemon_id = daemon_id
        self.runners = runners
        self.reloader = reloader
        self.items = items
        self.leader = leader
        self.inbound = inbound
        self.rollup = rollup.RollupCounter(clock)
        self._next_flush = 0.0
        self._next_prune = 0.0
        self._reported: str | None = None

    def tick(self, now: float) -> float:
        """Report changed states and flush the rollup; seconds until the next flush."""
        self.report_states()
        if now >= self._next_flush:
            self.flush_rollup(now)
        return max(self._next_flush - now, 0.0)

    def flush_rollup(self, now: float | None = None) -> None:
        """Write the per-minute counters that changed; the leader also deletes old rows."""
        now = self.clock.monotonic() if now is None else now
        self._next_flush = now + rollup.FLUSH_INTERVAL
        prune = None
        if now >= self._next_prune and self.leader():
            self._next_prune = now + ROLLUP_PRUNE_INTERVAL
            prune = self.clock.now() - timedelta(days=rollup.KEEP_DAYS)
        rollup.flush(self.store, self.rollup, self.daemon_id, prune_before=prune)

    def item_states(self) -> dict[str, dict[str, Any]]:
        """What this daemon runs of each item, as ``daemon.item_states`` records it."""
        states: dict[str, dict[str, Any]] = {}
        for name, runner in list(self.runners.items()):
            one: dict[str, Any] = {"state": running.READY if runner.ready else
                                   running.NOT_READY}
            if (last := self.rollup.last_outcome.get(name)) is not None:
                one["last_outcome"] = last
            pool = getattr(runner.adapter, "_servers", None)
            if pool is not None:
                one["servers"] = [{"url": url, "bad": pool.is_bad(url)}
                                  for url in pool.servers]
            if operations := getattr(runner.adapter, "operations", ()):
                one["operations"] = list(operations)
            states[name] = one
        for name in self.inbound():
            states.setdefault(name, {"state": running.READY, "inbound": True})
        for name, reason in self.reloader.failed.items():
            states.setdefault(name, {"state": running.FAILED})["detail"] = reason
        for name, reason in self.reloader.refused.items():
            states.setdefault(name, {"state": running.REFUSED})["refused"] = reason
        return states

    def report_states(self) -> None:
        """Rewrite ``daemon.items`` and ``daemon.item_states`` if they changed."""
        states = self.item_states()
        names = [i.name for i in self.items() if i.name in self.runners]
        file_hash = self.reloader.file_hash
        text = repr((names, sorted(states.items(), key=lambda kv: kv[0]), file_hash))
        if text == self._reported:
            return
        running.write_states(self.store, self.daemon_id, names, states, file_hash=file_hash)
        self._reported = text
