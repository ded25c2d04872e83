"""An item's guards, all middleware: schedule window, rate limit and circuit breaker.

The limiter runs before the breaker, so the breaker decides on the state after the wait.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from engine.clock import Clock
from engine.delivery.breaker import BreakerFields, BreakerSettings, CircuitBreaker, Transition
from engine.delivery.middleware import GuardMetrics, Middleware, settings_of
from engine.delivery.ratelimit import RateLimit, RateLimiter, RateLimitField
from engine.delivery.window import ScheduleWindow, WindowField
from engine.settings import OPERATION, Setting, add_settings

if TYPE_CHECKING:
    from adapters.settings import AdapterSettings
    from engine.eventsink import EventSink
    from engine.store.sql import SqlStore

__all__ = ["GUARD_SETTINGS", "GuardSettings", "ItemGuards"]

GUARD_SETTINGS: tuple[Setting, ...] = settings_of((ScheduleWindow, CircuitBreaker, RateLimiter))
add_settings(OPERATION, GUARD_SETTINGS)


@dataclass(frozen=True, kw_only=True)
class GuardSettings(RateLimitField, BreakerFields, WindowField):
    """The guard settings, typed (``{}``, 0 and None: not set): the fields each guard
    declares, in the order of :data:`GUARD_SETTINGS`."""


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
    """The window, rate limiter and breaker of one item in one daemon (None: not set)."""

    limiter: RateLimiter | None = None
    breaker: CircuitBreaker | None = None
    window: ScheduleWindow | None = None

    @classmethod
    def for_item(cls, item: GuardedItem, **options: Any) -> ItemGuards:
        """The guards of business operation ``item``."""
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
        """The guards ``settings`` ask for (``lease_seconds`` 0: no claim confirmation after a
        wait)."""
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
