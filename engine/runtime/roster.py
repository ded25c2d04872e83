"""The items a daemon runs: each one's runner built with its guards and middleware, then launched
where the daemon's :class:`~engine.runtime.execution.Runtime` runs it."""
from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.attempt import AttemptObserver
from engine.clock import Clock
from engine.config.production import ItemConfig, ProductionConfig
from engine.delivery.guards import ItemGuards
from engine.delivery.item import ItemContext, ItemRunner
from engine.observe.metrics import ItemMetrics, Metrics
from engine.runtime.alerts import AlertingEventLog
from engine.runtime.cluster import LeaseKeeper, is_fifo, item_lease_name
from engine.runtime.execution import Runtime
from engine.store.sql import SqlStore

if TYPE_CHECKING:
    from adapters.base import OutboundAdapter

# middleware made for each item, given its name (tracing, a test's observer)
MiddlewareFactory = Callable[[str], AttemptObserver]


@dataclass(kw_only=True)
class ItemRoster:
    """Builds and launches the runners of daemon ``owner``'s items and holds them in ``runners``.

    ``middleware`` runs after the item's guards, then the item's metrics; ``adapters`` replace
    the adapters the items would build; ``rng``: the retries' jitter source.
    """

    store: SqlStore
    clock: Clock
    owner: str
    production: Callable[[], ProductionConfig]
    env: Mapping[str, str]
    events: AlertingEventLog
    metrics: Metrics
    leases: LeaseKeeper
    runtime: Runtime
    runners: dict[str, ItemRunner]
    middleware: Sequence[MiddlewareFactory] = ()
    adapters: Mapping[str, OutboundAdapter] | None = None
    rng: random.Random | None = None

    def build_runners(self, items: list[ItemConfig]) -> dict[str, ItemRunner]:
        """A prepared runner for each of ``items``; if one fails, tear down the others and raise."""
        built: dict[str, ItemRunner] = {}
        try:
            for item in items:
                built[item.name] = self.build_runner(item)
        except Exception:
            for runner in built.values():
                runner.discard()
            raise
        return built

    def build_runner(self, item: ItemConfig) -> ItemRunner:
        """``item``'s runner, prepared but not started; raises :class:`EncoreError`."""
        production = self.production()
        lease = None
        if is_fifo(item):
            lease = functools.partial(self.leases.hold, item_lease_name(item.name))
        stop = threading.Event()
        guards = ItemGuards.for_item(item, store=self.store, clock=self.clock, owner=self.owner,
                                     events=self.events, metrics=self.metrics, stop=stop,
                                     lease_seconds=production.lease_seconds)
        middleware = (*(make(item.name) for make in self.middleware),
                      ItemMetrics(self.metrics, item.name))
        runner = ItemRunner(item, ItemContext(
            store=self.store, clock=self.clock, owner=self.owner,
            lease_seconds=production.lease_seconds, poll_interval=production.poll_interval,
            env=self.env, events=self.events, lease=lease, production=self.production,
            guards=guards, middleware=middleware, stop=stop,
            adapter=(self.adapters or {}).get(item.name), rng=self.rng,
            tuning=self.runtime.dispatch))
        guards.wake_with(runner.wakeup.set)
        runner.prepare()
        return runner

    def launch(self, runner: ItemRunner) -> None:
        """Start a prepared runner: from now on it claims messages."""
        if runner.lease is not None:
            self.leases.want(item_lease_name(runner.item.name))
        self.runners[runner.item.name] = runner
        self.runtime.launch(runner)
