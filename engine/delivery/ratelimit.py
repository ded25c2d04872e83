"""The rate limit of an item (docs/guards.md): at most N attempt starts per period across every
daemon, in a token bucket in the ``item_rate`` table.

A slot is reserved by one statement that says how long to wait, and the worker sleeps that long
once, before the attempt starts (so the wait is never part of a response timeout).
"""
from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.clock import Clock
from engine.delivery.middleware import GuardMetrics, Middleware
from engine.errors import AttemptHeld
from engine.settings import Setting, TypedSettings, setting

if TYPE_CHECKING:
    from engine.store.rows import MessageRow
    from engine.store.sql import SqlStore

__all__ = ["PERIODS", "RATE_LIMIT_SETTINGS", "RateLimit", "RateLimitField", "RateLimiter",
           "check_rate_limit"]

log = logging.getLogger(__name__)

PERIODS: dict[str, float] = {"s": 1.0, "min": 60.0, "h": 3600.0}  # unit → seconds
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|min|h)\s*$")
EXAMPLE = '"5/s", "300/min" or "1000/h"'


@dataclass(frozen=True)
class RateLimit:
    """``count`` attempt starts per ``period`` seconds, with a burst of at most ``count``."""

    count: int
    period: float  # seconds
    text: str  # as configured, normalised: "5/s"

    @property
    def per_second(self) -> float:
        """The refill rate: slots per second."""
        return self.count / self.period

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """``"N/s"``, ``"N/min"`` or ``"N/h"`` with a whole N ≥ 1; ValueError otherwise."""
        match = _RATE.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"{text!r} is not a rate; expected N/s, N/min or N/h with a whole "
                             f"N ≥ 1, e.g. {EXAMPLE}")
        count, unit = int(match.group(1)), match.group(2)
        if count < 1:
            raise ValueError(f"{text!r}: N must be at least 1 (leave rate_limit out for no "
                             "limit)")
        return cls(count=count, period=PERIODS[unit], text=f"{count}/{unit}")

    @classmethod
    def from_settings(cls, settings: RateLimitField) -> RateLimit | None:
        """The item's limit; None when ``rate_limit`` is not set (no limit)."""
        text = settings.rate_limit
        return None if not text else cls.parse(text)


def check_rate_limit(value: str) -> str:
    """Validate a ``rate_limit`` setting; returns it normalised (``"5 / s"`` → ``"5/s"``)."""
    return RateLimit.parse(value).text


@dataclass(frozen=True, kw_only=True)
class RateLimitField(TypedSettings):
    """The setting the rate limit reads."""

    rate_limit: str | None = setting(
        kind=str, default=None, check=check_rate_limit,
        help='at most N attempt starts per period over all daemons, burst ≤ N: "N/s", '
             '"N/min" or "N/h"; not set = no limit')


RATE_LIMIT_SETTINGS: tuple[Setting, ...] = RateLimitField.DECLARED


class RateLimiter(Middleware):
    """Waits before every attempt of one item for a slot of its shared bucket (``stop`` ends the
    wait)."""

    SETTINGS = RATE_LIMIT_SETTINGS

    def __init__(self, item: str, limit: RateLimit, *, store: SqlStore, clock: Clock,
                 stop: threading.Event | None = None, metrics: GuardMetrics | None = None,
                 owner: str | None = None, lease_seconds: float = 0.0) -> None:
        self.item = item
        self.limit = limit
        self.store = store
        self.clock = clock
        self.stop = stop or threading.Event()
        self.metrics = metrics
        self.owner = owner
        self.lease_seconds = lease_seconds
        store.rate_buckets.ensure(item, capacity=limit.count, now=clock.now())

    def before_attempt(self, row: MessageRow, number: int) -> None:
        wait = self.store.rate_buckets.take(self.item, capacity=self.limit.count,
                                            per_second=self.limit.per_second,
                                            now=self.clock.now())
        if wait <= 0:
            return None
        if self.metrics is not None:
            self.metrics.rate_limited(self.item, wait)
        log.debug("item %s: message %d waits %.3f s for a slot of rate_limit %s", self.item,
                  row.id, wait, self.limit.text)
        if self.clock.sleep(wait, self.stop):
            raise AttemptHeld(f"the daemon is stopping while message {row.id} waited for a "
                              f"slot of rate_limit {self.limit.text}")
        self._confirm_claim(row)
        return None

    def _confirm_claim(self, row: MessageRow) -> None:
        """After a wait: the claim on ``row`` is still this daemon's, or ClaimLost."""
        # lazy: validating a rate_limit (encore send) must not import the store
        from engine.delivery.claims import confirm_claim

        if self.owner is not None:
            confirm_claim(self.store, row, owner=self.owner, lease_seconds=self.lease_seconds,
                          clock=self.clock, why="while it waited for a rate-limit slot")
