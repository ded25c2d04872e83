"""Refused requests: :class:`Refused`, what a service raises to refuse one, and the event log's
record of them, at most once per client and minute (docs/security.md and docs/inbound.md).

An inbound port faces other systems: a misbehaving client may send thousands of bad
requests a minute. Each refusal is counted; the first of a client (its address, per
service) in a window of :data:`WINDOW` seconds writes one ``Warning`` event naming the
service, the client, the reason and how many were refused since that client's last event;
the others of the window only count.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engine.eventsink import EventSink

WINDOW = 60.0  # seconds: at most one event per client and service in this time
MAX_CLIENTS = 10_000  # clients remembered at once (the table is emptied when full)


class Refused(Exception):
    """A request refused before anything was created: ``status`` is the HTTP status,
    the text says what is wrong (it is shown to the caller); ``headers`` go with the
    answer (``WWW-Authenticate``, ``Retry-After``)."""

    def __init__(self, status: int, text: str, *,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = dict(headers or {})


@dataclass
class _Seen:
    logged_at: float  # monotonic seconds of the client's last event
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
        """Count a refusal of ``client`` (its host) by ``service``; True if it was written
        to the event log (the first in its window), False if only counted."""
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
