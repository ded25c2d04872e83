"""Failover across an item's servers, a failed one skipped for ``cooldown`` seconds
(docs/retries.md); the state is shared by the item's workers."""
from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Sequence
from urllib.parse import urlsplit, urlunsplit

from engine.clock import Clock

log = logging.getLogger(__name__)


class ServerPool:
    """The servers of one item and which of them are bad until when (monotonic seconds)."""

    def __init__(self, servers: Sequence[str], *, cooldown: float, clock: Clock,
                 item_name: str = "") -> None:
        if not servers:
            raise ValueError("a server pool needs at least one server")
        self.servers = tuple(servers)
        self.cooldown = cooldown
        self._clock = clock
        self._item = item_name
        self._bad_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def pick(self, exclude: Collection[str] = ()) -> str | None:
        """The server to try next, skipping ``exclude``; None when every server is excluded."""
        now = self._clock.monotonic()
        with self._lock:
            left = [s for s in self.servers if s not in exclude]
            healthy = [s for s in left if self._bad_until.get(s, now) <= now]
            if healthy:
                return healthy[0]
            if not left:
                return None
            return min(left, key=lambda s: self._bad_until[s])

    def mark_bad(self, server: str) -> None:
        """Skip ``server`` for ``cooldown`` seconds while another server is healthy."""
        if self.cooldown <= 0 or len(self.servers) == 1:
            return
        until = self._clock.monotonic() + self.cooldown
        with self._lock:
            self._bad_until[server] = until
        log.info("item %s: server %s marked bad for %g s", self._item, server, self.cooldown)

    def mark_good(self, server: str) -> None:
        """``server`` answered: it is healthy again."""
        with self._lock:
            self._bad_until.pop(server, None)

    def is_bad(self, server: str) -> bool:
        with self._lock:
            return self._bad_until.get(server, float("-inf")) > self._clock.monotonic()


def rebase(address: str, server: str) -> str:
    """``address`` moved to ``server``; a server with a path is used as it is."""
    parts = urlsplit(server)
    if parts.path not in ("", "/"):
        return server
    original = urlsplit(address)
    return urlunsplit((parts.scheme, parts.netloc, original.path, original.query, ""))


def join_path(base: str, path: str) -> str:
    """``base`` + ``path``; an empty path or ``"/"`` means ``base`` itself."""
    if path in ("", "/"):
        return base
    return base.rstrip("/") + "/" + path.lstrip("/")
