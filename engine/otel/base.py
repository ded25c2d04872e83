"""What a send and a delivery are to tracing when it is off; the spans subclass these. It
imports nothing, so the spans need not import :mod:`engine.otel`."""
from __future__ import annotations

from collections.abc import Sequence

__all__ = ["NO_DELIVERY", "NO_PRODUCER", "Delivery", "Producer"]


class Producer:
    """One send as tracing sees it; this base stores and records nothing."""

    context: str | None = None  # the W3C trace context to store with the message(s)

    def sent(self, message_ids: Sequence[int]) -> None:
        """The messages were committed with these ids."""


class Delivery:
    """One delivery as tracing sees it; this base (tracing off) records nothing."""

    def ended(self, result: str) -> None:
        """The delivery left the message so (``Completed``, ``Error``, ``Parked``, ...)."""


NO_PRODUCER = Producer()
NO_DELIVERY = Delivery()
