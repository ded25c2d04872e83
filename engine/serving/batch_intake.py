"""Durable intake for callers on an event loop, in batches, without a thread hop per request
(the hops took a third of a request's time, BENCHMARKS.md). Nothing is answered before its
commit."""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from engine.store.hotpath import Accepted, Intake
from engine.store.sql import SqlStore

__all__ = ["BatchIntake"]

log = logging.getLogger(__name__)

MAX_BATCH = 256
STOP_TIMEOUT = 5.0

_Pending = tuple[Intake, asyncio.AbstractEventLoop, "asyncio.Future[Accepted]"]


class BatchIntake:
    """:meth:`accept` from a coroutine, committed with whatever else is queued."""

    def __init__(self, store: SqlStore, *, name: str = "intake-batch") -> None:
        self.store = store
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._pending: list[_Pending] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.batches = 0
        self.intakes = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Commit what is queued, then end the thread."""
        with self._lock:
            self._stopping = True
            self._ready.notify()
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT)

    async def accept(self, intake: Intake) -> Accepted:
        """``intake`` committed durably; its Accepted, or the error of its write."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Accepted] = loop.create_future()
        with self._lock:
            if self._stopping:
                raise RuntimeError("the intake is stopping; nothing was accepted")
            self._pending.append((intake, loop, future))
            if len(self._pending) == 1:
                self._ready.notify()
        # a caller that goes away cancels only its wait: the intake is committed all the same
        return await future

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stopping:
                    self._ready.wait()
                if not self._pending:
                    return
                batch = self._pending[:MAX_BATCH]
                del self._pending[:MAX_BATCH]
            self._commit(batch)

    def _commit(self, batch: list[_Pending]) -> None:
        results: list[Any]
        try:
            results = self.store.accept_batch([intake for intake, _, _ in batch])
        except BaseException as exc:
            log.exception("a batch of %d intake(s) failed", len(batch))
            results = [exc] * len(batch)
        self.batches += 1
        self.intakes += len(batch)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Accepted], Any]]] = {}
        for (_, loop, future), result in zip(batch, results):
            by_loop.setdefault(loop, []).append((future, result))
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, settled)
            except RuntimeError:  # the loop closed meanwhile
                pass


def _settle(settled: list[tuple[asyncio.Future[Accepted], Any]]) -> None:
    for future, result in settled:
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
