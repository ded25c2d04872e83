"""What a send and a delivery are to tracing: :class:`Producer` and :class:`Delivery`.

These bases are what tracing hands out when it is off (:data:`NO_PRODUCER`,
:data:`NO_DELIVERY`); the spans of :mod:`engine.otel.spans` subclass them. A module of its
own, importing nothing, so that the spans need not import :mod:`engine.otel`, which imports
them when tracing starts.
"""
from __future__ import annotations

from collections.abc import Sequence

__all__ = ["NO_DELIVERY", "NO_PRODUCER", "Delivery", "Producer"]


class Producer:
    """One send as tracing sees it. This base is what a send gets with tracing off: no
    context to store, nothing to record."""

    context: str | None = None  # the W3C trace context to store with the message(s)

    def sent(self, message_ids: Sequence[int]) -> None:
        """The messages were committed with these ids."""


class Delivery:
    """One delivery as tracing sees it; this base (tracing off) records nothing."""

    def ended(self, result: str) -> None:
        """The delivery left the message so (``Completed``, ``Error``, ``Parked``, ...)."""


NO_PRODUCER = Producer()
NO_DELIVERY = Delivery()
