"""The successes of one item's workers, written in one transaction (a group commit).

A success waits at most :data:`FLUSH_WINDOW` for the dispatcher's next step, which writes every
pending one together; an ``urgent`` one (someone waits for it) is written at once on the
worker's thread. On a server database a pool's workers commit their own chunks'
successes side by side (:class:`OwnCommits`). docs/architecture.md, "Throughput".
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from engine.clock import Clock
from engine.delivery.claims import ClaimBook
from engine.errors import EncoreError
from engine.store.hotpath import Completion
from engine.store.sql import SqlStore

log = logging.getLogger(__name__)

FLUSH_WINDOW = 0.02  # seconds a success may wait for the group commit
MAX_PENDING = 500  # successes that force a group commit


class GroupCommit:
    """The successes of item ``target`` waiting for their commit; ``urgent_here``: an urgent
    success is written on the worker's thread (else at the dispatcher's next step)."""

    def __init__(self, store: SqlStore, clock: Clock, book: ClaimBook, *, target: str,
                 urgent_here: bool, wakeup: threading.Event) -> None:
        self.store = store
        self.clock = clock
        self.book = book
        self.target = target
        self.urgent_here = urgent_here
        self.wakeup = wakeup  # the dispatcher's: set when a commit should not wait
        self._lock = threading.Lock()
        self._pending: list[Completion] = []
        self._pending_ids: set[int] = set()
        self._oldest = 0.0

    def defer(self, completion: Completion) -> None:
        """Record a success with the next group commit (an ``urgent`` one at once)."""
        if completion.urgent and self.urgent_here:
            try:
                done = self.store.complete_many([completion], now=self.clock.now())
            except EncoreError as exc:
                log.warning("item %s: the success of message %d is recorded with the next "
                            "group commit: %s", self.target, completion.message_id, exc)
            else:
                self.committed([completion], done)
                return
        with self._lock:
            if not self._pending or completion.urgent:
                self._oldest = (self.clock.monotonic() - FLUSH_WINDOW
                                if completion.urgent else self.clock.monotonic())
            self._pending.append(completion)
            self._pending_ids.add(completion.message_id)
            full = len(self._pending) >= MAX_PENDING
        if full or completion.urgent:
            self.wakeup.set()

    def is_pending(self, message_id: int) -> bool:
        """True while the success of ``message_id`` waits for the group commit."""
        with self._lock:
            return message_id in self._pending_ids

    def wait(self, wait: float) -> float:
        """``wait`` seconds, or less if a pending success would wait longer than the window."""
        with self._lock:
            if not self._pending:
                return wait
            left = FLUSH_WINDOW - (self.clock.monotonic() - self._oldest)
        return max(min(wait, left), 0.0)

    def flush(self) -> None:
        """Write the pending successes in one transaction."""
        with self.taking() as pending:
            if pending:
                self.committed(pending, self.store.complete_many(pending,
                                                                 now=self.clock.now()))

    def flush_quietly(self) -> None:
        """:meth:`flush` at a stop: on a database error the successes are given up."""
        try:
            self.flush()
        except EncoreError as exc:
            log.error("item %s: could not record successes at stop (their attempts count as "
                      "outcome unknown): %s", self.target, exc)
            with self._lock:
                self._pending.clear()
                self._pending_ids.clear()

    @contextmanager
    def taking(self) -> Iterator[list[Completion]]:
        """The pending successes, taken for a commit; given back if it fails."""
        with self._lock:
            pending, self._pending = self._pending, []
            self._pending_ids = set()
        try:
            yield pending
        except BaseException:
            with self._lock:
                self._pending[:0] = pending
                self._pending_ids.update(c.message_id for c in pending)
            raise

    def committed(self, pending: list[Completion], done_ids: list[int]) -> None:
        """The commit of ``pending`` ended, writing ``done_ids``: their claims are let go."""
        done = set(done_ids)
        lost = [c.message_id for c in pending if c.message_id not in done]
        if lost:
            log.warning("item %s: message(s) %s were taken over by another daemon before "
                        "their success was recorded; that daemon's delivery counts",
                        self.target, lost)
        self.book.committed(pending)


class Dispatching(Protocol):
    """What :class:`OwnCommits` needs of its item's dispatcher."""

    @property
    def commits(self) -> GroupCommit: ...

    @property
    def clock(self) -> Clock: ...

    def finished(self, message_id: int, seconds: float, *, ended: bool = False,
                 kept: bool = False) -> None: ...

    def commit_own(self, completions: list[Completion]) -> None: ...


class OwnCommits:
    """One worker's successes on a server database, committed by the worker at the end of each chunk
    on its own connection, so a pool's commits run side by side. Urgent successes and one-message
    chunks go to the group commit; claims are held until the commit."""

    def __init__(self, dispatcher: Dispatching) -> None:
        self.dispatcher = dispatcher
        self.group: Callable[[Completion], None] = dispatcher.commits.defer
        self.clock = dispatcher.clock
        self.chunk = 0  # messages in the chunk being delivered
        self._oldest = 0.0
        self._pending: list[Completion] = []
        self._ids: set[int] = set()

    def defer(self, completion: Completion) -> None:
        """Where the worker's successes go (its ``defer``)."""
        if completion.urgent or self.chunk < 2:
            self.group(completion)
        else:
            if not self._pending:
                self._oldest = self.clock.monotonic()
            self._pending.append(completion)
            self._ids.add(completion.message_id)

    def due(self) -> bool:
        """A success kept has waited :data:`FLUSH_WINDOW`: commit now, chunk done or not."""
        return bool(self._pending) and self.clock.monotonic() - self._oldest >= FLUSH_WINDOW

    def finished(self, message_id: int, seconds: float, *, ended: bool) -> None:
        """:meth:`Dispatcher.finished`, told whether the success waits here."""
        self.dispatcher.finished(message_id, seconds, ended=ended,
                                 kept=message_id in self._ids)

    def flush(self) -> None:
        """Commit the successes kept (if that fails, the group commit takes them)."""
        if self._pending:
            pending, self._pending, self._ids = self._pending, [], set()
            self.dispatcher.commit_own(pending)
