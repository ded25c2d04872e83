"""Durable intake for callers on an event loop, in batches, without a thread per request.

An async inbound request used to take two thread hops (to a pool thread, which waited in the
store's group commit, and back), each a wake-up of a thread that must then win the
interpreter lock from the event loop and the item's workers. With 16 clients on one async
route the hops took a third of a request's time in the daemon (BENCHMARKS.md). Here the
request's body is checked on the loop, its :class:`~engine.store.hotpath.Intake` queued,
and the request awaits a future; one thread of its own commits everything queued meanwhile
in one durable transaction (:meth:`SqlStore.accept_batch`) and settles the batch's futures
with one call back into each loop. A batch has at most :data:`MAX_BATCH` intakes; nothing
is answered before its commit, so what a caller hears is as durable as before.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from engine.store.hotpath import Accepted, Intake
from engine.store.sql import SqlStore

__all__ = ["BatchIntake"]

log = logging.getLogger(__name__)

MAX_BATCH = 256  # intakes committed in one transaction at most
STOP_TIMEOUT = 5.0  # seconds a stop waits for the batch in progress

_Pending = tuple[Intake, asyncio.AbstractEventLoop, "asyncio.Future[Accepted]"]


class BatchIntake:
    """:meth:`accept` from a coroutine: the intake is committed with whatever else is
    queued, by the thread of this object (:meth:`start`, :meth:`stop`)."""

    def __init__(self, store: SqlStore, *, name: str = "intake-batch") -> None:
        self.store = store
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._pending: list[_Pending] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.batches = 0  # transactions committed, for tests and benchmarks
        self.intakes = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Commit what is queued, then end the thread; an :meth:`accept` after the stop
        raises RuntimeError (nothing accepted)."""
        with self._lock:
            self._stopping = True
            self._ready.notify()
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT)

    async def accept(self, intake: Intake) -> Accepted:
        """``intake`` committed durably (with others); its Accepted, or the error of its own
        write (the store's StoreError, say)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Accepted] = loop.create_future()
        with self._lock:
            if self._stopping:
                raise RuntimeError("the intake is stopping; nothing was accepted")
            self._pending.append((intake, loop, future))
            if len(self._pending) == 1:
                self._ready.notify()
        # a caller that goes away (its client closed the connection) cancels only its wait:
        # the intake is queued and is committed all the same, as a hop's work was
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
        except BaseException as exc:  # every caller hears it; the thread lives
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
            except RuntimeError:  # the loop closed meanwhile: nobody waits for these
                pass


def _settle(settled: list[tuple[asyncio.Future[Accepted], Any]]) -> None:
    for future, result in settled:
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
