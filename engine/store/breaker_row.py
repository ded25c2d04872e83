"""A circuit breaker's row as the store hands it out, and its states: what the breaker logic
(:mod:`engine.delivery.breaker`) needs of the store without importing SQL."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "BreakerRow"]

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


@dataclass(frozen=True)
class BreakerRow:
    """An ``item_breaker`` row (timestamps aware UTC). ``open_until``: while ``open``, the
    end of the open period; while ``half_open``, when the probe counts as lost."""

    item: str
    state: str
    failures: int  # consecutive failed attempts counted while closed
    open_until: datetime | None
    probe_owner: str | None
    updated_at: datetime
    version: int = 0  # one more with every transition (their order in the database)

    @classmethod
    def closed(cls, item: str, now: datetime) -> BreakerRow:
        return cls(item=item, state=CLOSED, failures=0, open_until=None, probe_owner=None,
                   updated_at=now)
