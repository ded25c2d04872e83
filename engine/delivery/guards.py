"""The guards an item's settings ask for around its deliveries: its schedule window
(:mod:`engine.delivery.window`), its rate limit (:mod:`engine.delivery.ratelimit`) and its
circuit breaker (:mod:`engine.delivery.breaker`).

All three are middleware (:mod:`engine.delivery.middleware`). The daemon builds them for each
item and hands them to its :class:`~engine.delivery.item.ItemRunner`; an item that sets none
gets none, and pays nothing for them. The window is asked first before a claim; the limiter
runs first before an attempt: a worker waits for its slot, and only then does the breaker
decide, on the state of that moment, whether the attempt starts.

Their settings are declared by each of them (``SETTINGS``) and added here to every business
operation's (:func:`engine.settings.add_settings`): the production loader imports this module
before it validates an item, and :class:`GuardSettings` is what they read, typed.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from engine.clock import Clock
from engine.delivery.breaker import BreakerSettings, CircuitBreaker, Transition
from engine.delivery.middleware import GuardMetrics, Middleware, settings_of
from engine.delivery.ratelimit import RateLimit, RateLimiter
from engine.delivery.window import ScheduleWindow
from engine.settings import OPERATION, Setting, TypedSettings, add_settings

if TYPE_CHECKING:
    from adapters.settings import AdapterSettings
    from engine.eventsink import EventSink
    from engine.store.sql import SqlStore

__all__ = ["GUARD_SETTINGS", "GuardSettings", "ItemGuards"]

# the guards' settings, in the order an item's page lists them, among every operation's
GUARD_SETTINGS: tuple[Setting, ...] = settings_of((ScheduleWindow, CircuitBreaker, RateLimiter))
add_settings(OPERATION, GUARD_SETTINGS)


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardSettings(TypedSettings):
    """The settings of :data:`GUARD_SETTINGS`, typed: ``schedule`` ``{}`` = always open;
    ``breaker_threshold`` 0 = no breaker; ``rate_limit`` None = no limit."""

    DECLARED: ClassVar[tuple[Setting, ...]] = GUARD_SETTINGS

    schedule: Mapping[str, str]  # {"start": cron, "stop": cron}, or {}
    breaker_threshold: int  # failed attempts
    breaker_open_seconds: float
    rate_limit: str | None  # "N/s", "N/min" or "N/h"


class GuardedItem(Protocol):
    """What the guards read of an item (:class:`~engine.config.production.ItemConfig`)."""

    @property
    def name(self) -> str: ...

    @property
    def settings(self) -> Mapping[str, Any]: ...

    @property
    def adapter_settings(self) -> AdapterSettings | None: ...


@dataclass
class ItemGuards:
    """The schedule window, rate limiter and circuit breaker of one item in one daemon
    (None: not set)."""

    limiter: RateLimiter | None = None
    breaker: CircuitBreaker | None = None
    window: ScheduleWindow | None = None

    @classmethod
    def for_item(cls, item: GuardedItem, **options: Any) -> ItemGuards:
        """The guards of business operation ``item``, as :meth:`from_settings` with its
        settings and its adapter's response timeout."""
        adapter = item.adapter_settings
        return cls.from_settings(
            item.name, GuardSettings.from_validated(item.settings),
            response_timeout=adapter.response_timeout if adapter is not None else 0.0,
            **options)

    @classmethod
    def from_settings(cls, item: str, settings: GuardSettings, *, store: SqlStore,
                      clock: Clock, owner: str, response_timeout: float = 0.0,
                      events: EventSink | None = None, metrics: GuardMetrics | None = None,
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
                metrics=metrics, listener=listener),
            window=ScheduleWindow.from_setting(dict(settings.schedule), clock))

    @property
    def observers(self) -> list[Middleware]:
        """The guards that act around attempts, in the order they run."""
        return [g for g in (self.limiter, self.breaker) if g is not None]

    @property
    def middleware(self) -> list[Middleware]:
        """Every guard, in the order they run (the window only answers ``may_claim``)."""
        return [g for g in (self.window, self.limiter, self.breaker) if g is not None]

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
