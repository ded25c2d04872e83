"""The guards an item's settings ask for around its attempts: its rate limit
(:mod:`engine.delivery.ratelimit`) and its circuit breaker (:mod:`engine.delivery.breaker`).

Both are :class:`~engine.attempt.AttemptObserver`\\ s. The daemon builds them for each item
and hands them to its :class:`~engine.delivery.item.ItemRunner`; an item that sets neither gets
none, and pays nothing for them. The limiter runs first: a worker waits for its slot, and only then
does the breaker decide, on the state of that moment, whether the attempt starts.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.attempt import AttemptObserver
from engine.clock import Clock
from engine.delivery.breaker import BreakerSettings, CircuitBreaker, Transition
from engine.delivery.ratelimit import RateLimit, RateLimiter

if TYPE_CHECKING:
    from engine.config.production import ItemConfig
    from engine.eventsink import EventSink
    from engine.host import OperationSettings
    from engine.runtime.metrics import Metrics
    from engine.store.sql import SqlStore

__all__ = ["ItemGuards"]


@dataclass
class ItemGuards:
    """The rate limiter and circuit breaker of one item in one daemon (None: not set)."""

    limiter: RateLimiter | None = None
    breaker: CircuitBreaker | None = None

    @classmethod
    def for_item(cls, item: ItemConfig, **options: Any) -> ItemGuards:
        """The guards of business operation ``item``, as :meth:`from_settings` with its
        settings and its adapter's response timeout."""
        assert item.operation_settings is not None, "only a business operation has guards"
        adapter = item.adapter_settings
        return cls.from_settings(
            item.name, item.operation_settings,
            response_timeout=adapter.response_timeout if adapter is not None else 0.0,
            **options)

    @classmethod
    def from_settings(cls, item: str, settings: OperationSettings, *, store: SqlStore,
                      clock: Clock, owner: str, response_timeout: float = 0.0,
                      events: EventSink | None = None, metrics: Metrics | None = None,
                      stop: threading.Event | None = None, lease_seconds: float = 0.0,
                      listener: Transition | None = None) -> ItemGuards:
        """The guards ``settings`` (an item's) ask for. ``response_timeout``: seconds an
        attempt may take (the breaker's probe counts as lost after its open period and
        that); ``stop``: set when the item stops (a worker waiting for a rate-limit slot
        then gives up); ``lease_seconds``: the daemon's claim lease (a claim is confirmed
        after a wait for a slot; 0: not confirmed, one process only)."""
        limit = RateLimit.from_settings(settings)
        breaker = BreakerSettings.from_settings(settings, response_timeout=response_timeout)
        return cls(
            limiter=None if limit is None else RateLimiter(
                item, limit, store=store, clock=clock, stop=stop, metrics=metrics,
                owner=owner if lease_seconds > 0 else None, lease_seconds=lease_seconds),
            breaker=None if breaker is None else CircuitBreaker(
                item, breaker, store=store, clock=clock, owner=owner, events=events,
                metrics=metrics, listener=listener))

    @property
    def observers(self) -> list[AttemptObserver]:
        """The observers for the item's workers, in the order they run."""
        return [g for g in (self.limiter, self.breaker) if g is not None]

    @property
    def may_claim(self) -> Callable[[], bool] | None:
        """What the dispatcher asks before each claim (None: nothing to ask)."""
        return None if self.breaker is None else self.breaker.allows_claims

    def wake_with(self, wake: Callable[[], object]) -> None:
        """Call ``wake`` when the breaker's open period ends (the dispatcher's wake-up)."""
        if self.breaker is not None:
            self.breaker.set_wake(wake)

    def changed_elsewhere(self) -> None:
        """Another daemon opened or closed the breaker (an announcement came)."""
        if self.breaker is not None:
            self.breaker.invalidate()

    def close(self) -> None:
        """The item stops: cancel pending wake-ups."""
        if self.breaker is not None:
            self.breaker.close_timer()
