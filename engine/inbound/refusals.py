"""Refused requests: :class:`Refused`, and the event log's record of them, at most once per
client and minute, since a misbehaving client may send thousands a minute."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engine.eventsink import EventSink

WINDOW = 60.0
MAX_CLIENTS = 10_000


class Refused(Exception):
    """A request refused before anything was created, with its HTTP ``status``, a text shown
    to the caller and ``headers`` for the answer."""

    def __init__(self, status: int, text: str, *,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = dict(headers or {})


@dataclass
class _Seen:
    logged_at: float
    since: int = 0  # refusals after that event, not yet logged


class RefusalLog:
    """Writes refusals to ``events``, one event per (service, client) and :data:`WINDOW`."""

    def __init__(self, events: EventSink, *, window: float = WINDOW,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.events = events
        self.window = window
        self._monotonic = monotonic
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._lock = threading.Lock()

    def refused(self, service: str, client: str, reason: str) -> bool:
        """Count a refusal of ``client`` by ``service``; True if it was written to the log."""
        now = self._monotonic()
        with self._lock:
            seen = self._seen.get((service, client))
            if seen is not None and now - seen.logged_at < self.window:
                seen.since += 1
                return False
            earlier = seen.since if seen is not None else 0
            if len(self._seen) >= MAX_CLIENTS:
                self._seen.clear()
            self._seen[(service, client)] = _Seen(logged_at=now)
        more = (f" ({earlier} more refused since the last event about this client)"
                if earlier else "")
        self.events.write("Warning", f"{service} refused a request from {client}: "
                                     f"{reason}{more}; further refusals of this client are "
                                     f"logged at most once a minute", config_name=service,
                          source_class="InboundService", source_method="refuse")
        return True
