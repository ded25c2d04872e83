"""Group commit: writes that arrive together share one durable commit.

Callers arriving while a commit runs queue up; when it ends, one of them leads a commit of
every queued write, and each returns once its own is durable. A caller alone leads at once.
If a batch fails, each write is retried alone so that a bad one fails only its caller.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, cast

W = TypeVar("W")
R = TypeVar("R")


class _Ticket(Generic[W, R]):
    """A queued write; ``done`` (a lock, the cheapest one-shot signal) is released once,
    when its caller may go on."""

    __slots__ = ("write", "result", "error", "done", "lead")

    def __init__(self, write: W) -> None:
        self.write = write
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = threading.Lock()
        self.done.acquire()
        self.lead = False  # woken to lead the next commit


class GroupCommit(Generic[W, R]):
    """Commits writes in groups with ``commit_one(w)`` or ``commit_many(ws)``."""

    def __init__(self, commit_one: Callable[[W], R],
                 commit_many: Callable[[Sequence[W]], list[R]]) -> None:
        self._commit_one = commit_one
        self._commit_many = commit_many
        self._lock = threading.Lock()
        self._queue: list[_Ticket[W, R]] = []
        self._busy = False
        self.commits = 0
        self.writes = 0

    def submit(self, write: W) -> R:
        """Commit ``write`` (with whatever else is waiting); its result once durable."""
        with self._lock:
            alone = not self._busy
            self._busy = True
            if not alone:
                ticket: _Ticket[W, R] = _Ticket(write)
                self._queue.append(ticket)
        if alone:
            self.commits += 1
            self.writes += 1
            try:
                return self._commit_one(write)
            finally:
                self._hand_on()
        ticket.done.acquire()
        if not ticket.lead:
            return self._outcome(ticket)
        self._lead()
        return self._outcome(ticket)

    def _lead(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
        try:
            self._commit(batch)
        finally:
            for ticket in batch:
                if not ticket.lead:  # the leader's own ticket woke it already
                    ticket.done.release()
            self._hand_on()

    def _hand_on(self) -> None:
        """A commit ended: the first write queued meanwhile leads the next one."""
        with self._lock:
            following = self._queue[0] if self._queue else None
            if following is None:
                self._busy = False
            else:
                following.lead = True
        if following is not None:
            following.done.release()

    def _commit(self, batch: list[_Ticket[W, R]]) -> None:
        self.commits += 1
        self.writes += len(batch)
        outcomes = commit_together([t.write for t in batch], self._commit_one, self._commit_many)
        for ticket, outcome in zip(batch, outcomes):
            if isinstance(outcome, BaseException):
                ticket.error = outcome
            else:
                ticket.result = outcome

    @staticmethod
    def _outcome(ticket: _Ticket[W, R]) -> R:
        if ticket.error is not None:
            raise ticket.error
        return cast(R, ticket.result)


def commit_together(writes: Sequence[W], commit_one: Callable[[W], R],
                    commit_many: Callable[[Sequence[W]], list[R]]) -> list[R | BaseException]:
    """``writes`` in one transaction or, if it fails, each alone: each result in order, or
    the error of a write that failed alone."""
    if len(writes) > 1:
        try:
            return list(commit_many(writes))
        except Exception:
            pass
    outcomes: list[R | BaseException] = []
    for write in writes:
        try:
            outcomes.append(commit_one(write))
        except BaseException as exc:
            outcomes.append(exc)
    return outcomes
