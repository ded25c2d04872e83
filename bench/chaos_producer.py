"""The fault campaign's producer: one thread per database sending messages through
Encore's client API (:func:`engine.client.send_message`), through faults and all.

Messages go to ``Idem``, ``Once`` and ``Fifo`` in turn, one at a time, so the FIFO item's
accept order is its id order. Each body carries a unique *tag* (``PREFIX:ITEM:N``, with
``!fail`` in one in twenty of the Idem and Once tags — the server always refuses those —
and ``!slow`` in one in twenty-five — answered too late the first time; see
bench/chaos_server.py). A send that raises is *refused*: not accepted, although its
message may exist all the same (the commit may have happened before the connection
broke); the checker holds every message in the database to the invariants, accepted or
not, and every accepted one to being there.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from bench.chaos_daemons import ITEMS
from bench.chaos_server import FAIL_MARK, SLOW_MARK
from engine.client import send_message
from engine.config.production import load_production
from engine.store.sql import SqlStore

__all__ = ["Producer"]

log = logging.getLogger(__name__)


def tag_of(prefix: str, item: str, n: int) -> str:
    mark = ""
    if item != "Fifo":
        mark = FAIL_MARK if n % 20 == 7 else SLOW_MARK if n % 25 == 11 else ""
    return f"{prefix}:{item}:{n}{mark}"


class Producer:
    def __init__(self, prefix: str, url: str, production: Path, *, rate: float) -> None:
        self.prefix = prefix
        self.url = url
        self.production = load_production(production)
        self.interval = 1.0 / rate  # seconds between two sends
        self.accepted: dict[str, int] = {}  # tag → message id
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"producer-{prefix}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)

    def _run(self) -> None:
        store = SqlStore(self.url)
        items = list(ITEMS)
        n = 0
        try:
            next_at = time.monotonic()
            while not self._stop.is_set():
                item = items[n % len(items)]
                tag = tag_of(self.prefix, item, n)
                self._send(store, item, tag)
                n += 1
                next_at += self.interval
                self._stop.wait(max(0.0, next_at - time.monotonic()))
                next_at = max(next_at, time.monotonic() - 1.0)  # no burst after a stall
        finally:
            store.dispose()

    def _send(self, store: SqlStore, item: str, tag: str) -> None:
        try:
            mid = send_message(store, self.production, item,
                               {"method": "POST", "path": "/m", "body": tag},
                               source="chaos")
        except Exception as exc:  # the database is away: not accepted
            self.refused += 1
            log.debug("send %s refused: %s", tag, exc)
            return
        self.accepted[tag] = mid
