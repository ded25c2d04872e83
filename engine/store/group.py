"""Group commit: writes that arrive together share one durable commit.

A durable commit waits for the disk (a flush of SQLite's log, PostgreSQL's WAL), which costs
more than the statements it commits. Callers of :meth:`GroupCommit.submit` that arrive while
a commit is in progress queue up; when it ends, one of them (the *leader*) commits every
queued write in one transaction, and each caller returns once its own write is durable —
never before. A caller alone pays nothing more than a lock: it leads its own commit at once.

No thread of its own: the callers take turns. If a batch fails as a whole, each of its
writes is tried again on its own, so that one bad write fails only its caller.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, cast

W = TypeVar("W")  # a write
R = TypeVar("R")  # its result


class _Ticket(Generic[W, R]):
    """A queued write. ``done`` is held from the start and released once, when its caller
    may go on (a lock is the cheapest one-shot signal: an Event builds a Condition, and the
    portal makes a ticket per concurrent request)."""

    __slots__ = ("write", "result", "error", "done", "lead")

    def __init__(self, write: W) -> None:
        self.write = write
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = threading.Lock()
        self.done.acquire()
        self.lead = False  # woken to lead the next commit, not with a result


class GroupCommit(Generic[W, R]):
    """Commits writes ``W`` in groups: ``commit_one(w)`` for a write alone, ``commit_many(ws)``
    (one transaction, results in order) for several."""

    def __init__(self, commit_one: Callable[[W], R],
                 commit_many: Callable[[Sequence[W]], list[R]]) -> None:
        self._commit_one = commit_one
        self._commit_many = commit_many
        self._lock = threading.Lock()
        self._queue: list[_Ticket[W, R]] = []
        self._busy = False  # a leader is committing
        self.commits = 0  # transactions committed, for tests and benchmarks
        self.writes = 0

    def submit(self, write: W) -> R:
        """Commit ``write`` (with whatever else is waiting); its result once durable."""
        with self._lock:
            alone = not self._busy
            self._busy = True
            if not alone:
                ticket: _Ticket[W, R] = _Ticket(write)
                self._queue.append(ticket)
        if alone:  # nobody is committing: this write is a batch of one, led at once
            self.commits += 1
            self.writes += 1
            try:
                return self._commit_one(write)
            finally:
                self._hand_on()
        ticket.done.acquire()  # released with its result, or to lead the next commit
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
        return cast(R, ticket.result)  # set: no error, so the commit gave it


def commit_together(writes: Sequence[W], commit_one: Callable[[W], R],
                    commit_many: Callable[[Sequence[W]], list[R]]) -> list[R | BaseException]:
    """``writes`` in one transaction (``commit_many``) or, when that fails as a whole, each
    in one of its own: each write's result in order, or the error of a write that failed
    alone (a batch of one is committed alone at once)."""
    if len(writes) > 1:
        try:
            return list(commit_many(writes))
        except Exception:  # tried again one by one below
            pass
    outcomes: list[R | BaseException] = []
    for write in writes:
        try:
            outcomes.append(commit_one(write))
        except BaseException as exc:  # handed to that write's caller
            outcomes.append(exc)
    return outcomes
