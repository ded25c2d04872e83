"""What both dialects share: the rows a step returns and the pool of driver connections of
one store (the statements themselves are in :mod:`engine.store.statements`)."""
from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from engine.errors import StoreError
from engine.store.database import connection_looks_dead, reason_of
from engine.store.rows import MessageRow
from engine.store.statements.shared import COLUMNS
from engine.store.text import storable

T = TypeVar("T")

MAX_IDLE_CONNECTIONS = 8  # driver connections kept open between steps, per store
_NO_ID = 2**62  # larger than any id: "no limit" in the FIFO head probe


def isolate(picked: Sequence[Any], alone: bool) -> list[Any]:
    """:data:`~engine.store.statements.shared.ISOLATE` (a suspect comes alone) on
    ``(id, attempts, deliveries)`` rows in id order."""
    if picked and picked[0][2] > 0:
        return list(picked[:1]) if alone else []
    return list(itertools.takewhile(lambda p: p[2] == 0, picked))


@dataclass(frozen=True)
class Accepted:
    """A message taken in: its id and session, and False when an earlier message with the
    same idempotency key was found instead (nothing was created)."""

    id: int
    session_id: int
    created: bool


@dataclass(frozen=True)
class Intake:
    """One message to accept (the arguments of :meth:`HotPath.accept`)."""

    target: str
    body_class: str | None
    body: str
    source: str | None
    session_id: int | None
    now: datetime
    idempotency_key: str | None
    trace_context: str | None
    waited: bool = False
    search_paths: tuple[str, ...] = ()  # the target's search properties


@dataclass(frozen=True)
class Outcome:
    """A message as it is now, with its response's body read in the same statement (a
    waiter's one look): ``response``: False when it has none (or it was purged)."""

    row: MessageRow
    response: bool
    response_class: str | None
    response_body: str | None


@dataclass(frozen=True)
class Claimed:
    """One claimed message and, when the claim began it, the id of its attempt 1 and the
    server recorded with it.
    ``interrupted``: its deliveries that began before this claim and never ended (the
    count before the claim; above 0, the message was claimed alone)."""

    row: MessageRow
    begun: int | None
    interrupted: int = 0
    server: str | None = None  # what the attempt begun records as its server


@dataclass(frozen=True)
class Grant:
    """An item's leave to take a new message claimed as it is accepted (a *direct take*,
    :meth:`engine.store.sql.SqlStore.accept`): the claim's owner and lease, whether the
    claim begins attempt 1 (idempotent items), whether the item is FIFO (then only a
    message with nothing of the item queued or delivered ahead of it) and its configured
    switch (the operator's override in ``item_state`` wins, as for any claim)."""

    owner: str
    lease_seconds: float
    begin: bool
    fifo: bool
    enabled: bool
    server: str | None = None  # recorded with the attempt begun (the adapter's pick)


class Taker(Protocol):
    """What takes messages directly (an item's dispatcher in this process): ``reserve()``
    a free worker (None: none now, claim as usual), then ``take(claimed)`` the message
    claimed for it, or ``release()`` the reservation when the message was not claimed."""

    def reserve(self) -> Grant | None: ...

    def take(self, claimed: Claimed) -> None: ...

    def release(self) -> None: ...


@dataclass(frozen=True)
class Completion:
    """A successful attempt to record: the message's completion, its attempt's end and its
    response (if any), conditional on the claim ``token``. ``attempt_id`` None: the attempt
    was ended already (an answer from a hook); ``started_at`` None: its start stays as it
    was recorded."""

    message_id: int
    token: int
    attempt_id: int | None
    started_at: datetime | None
    ended_at: datetime | None
    server: str | None
    response_class: str | None
    response_body: str | None
    urgent: bool = False  # someone waits for the message: commit it without delay


@dataclass(frozen=True)
class AttemptEnding:
    """The end of one attempt to record, a failure's (a success's goes with its
    :class:`Completion`): ``started_at`` None keeps the start its begin recorded; ``token``:
    only while the attempt's message's claim is that one."""

    attempt_id: int
    ended_at: datetime
    outcome: str
    server: str | None = None
    status_code: int | None = None
    error_text: str | None = None
    started_at: datetime | None = None
    token: int | None = None


class Connector(Protocol):
    """What hands a hot path its driver connections: an SQLAlchemy engine, or the light
    connector of :mod:`engine.store.lite` (``encore send`` without SQLAlchemy)."""

    def raw_connection(self) -> Any: ...


class HotPath:
    """The per-message statements of one store. Subclasses bind them to a driver.

    ``on_waited_done(ids)`` is called after the commit that completed messages someone waits
    for (their ``waited`` flag is set), so that the store announces them; just before it,
    ``on_completed(responses)`` with their responses (message id → (class, body), body
    None: no response), which the store's waiters here answer with."""

    def __init__(self, engine: Connector, translate: Callable[[BaseException], bool], *,
                 shared: bool = False) -> None:
        """``engine``: what hands out driver connections (``raw_connection()``, as an
        SQLAlchemy engine does); ``shared``: it holds one connection for everyone (an
        in-memory database)."""
        self._engine = engine
        self.on_waited_done: Callable[[list[int]], object] = lambda ids: None
        self.on_completed: Callable[[dict[int, tuple[str | None, str | None]]], object] = \
            lambda responses: None
        self._is_driver_error = translate
        # idle connections by durability: commits that wait for the disk, and those that do
        # not (lists: append and pop are atomic, and cost no lock, unlike a queue.Queue's)
        self._idle: dict[bool, list[Any]] = {True: [], False: []}
        # a store dropped without dispose() closes its connections when it is collected
        weakref.finalize(self, _close_all, self._idle)
        self._shared = shared  # one in-memory database

    def after_completion(self, completions: Sequence[Completion], waited: list[int]) -> None:
        """After the commit of ``completions``: those someone waits for (``waited``) go to
        ``on_completed`` with their responses, then are announced."""
        if not waited:
            return
        ids = set(waited)
        self.on_completed({c.message_id: (c.response_class, c.response_body)
                           for c in completions if c.message_id in ids})
        self.on_waited_done(waited)

    # a driver whose hot path claims a message as it accepts it (:meth:`accept_claimed`)
    direct_takes = False
    parallel_commits = False  # commits on several connections run side by side

    def accept_claimed(self, target: str, body_class: str | None, body: str, *,
                       source: str | None, session_id: int | None, now: datetime,
                       idempotency_key: str | None, trace_context: str | None,
                       durable: bool, grant: Grant) -> tuple[Accepted, Claimed | None]:
        raise NotImplementedError

    # -- connections ---------------------------------------------------------------------
    def _new_connection(self, durable: bool) -> Any:
        """A driver connection of our own, detached from SQLAlchemy's pool (it keeps the
        settings the engine's connect hooks gave it)."""
        raw = self._engine.raw_connection()
        conn = raw.driver_connection
        raw.detach()
        try:
            self._prepare(conn, durable)
        except BaseException:
            _close(conn)  # detached: nobody else would close it
            raise
        return conn

    def _prepare(self, conn: Any, durable: bool) -> None:
        """Per-dialect settings of a new hot-path connection whose commits are ``durable``
        (or not)."""

    @contextmanager
    def _connection(self, durable: bool = False) -> Iterator[Any]:
        if self._shared:
            raw = self._guard(self._engine.raw_connection)
            try:
                yield raw.driver_connection
            finally:
                raw.close()
            return
        idle = self._idle[durable]
        conn = None
        while conn is None:
            try:
                conn = idle.pop()
            except IndexError:
                conn = self._guard(lambda: self._new_connection(durable))
            else:
                if connection_looks_dead(conn):  # its server went away (a failover)
                    _close(conn)
                    conn = None
        try:
            yield conn
        except BaseException:
            lost = getattr(conn, "broken", False)  # psycopg: the server is gone
            _close(conn)  # its state is unknown: never reuse it
            if lost:  # the idle ones went with the same server: connect afresh
                _close_all(self._idle)
            raise
        if len(idle) < MAX_IDLE_CONNECTIONS:
            idle.append(conn)
        else:
            _close(conn)

    def _guard(self, func: Callable[[], T]) -> T:
        """``func()``, a driver error raised as StoreError with its reason."""
        try:
            return func()
        except Exception as exc:
            if self._is_driver_error(exc):
                raise StoreError(f"database error: {reason_of(exc)}") from exc
            raise

    def dispose(self) -> None:
        _close_all(self._idle)

    # -- steps (per dialect) ---------------------------------------------------------------
    # ``search_paths``: the target's search properties; the rows they give are inserted
    # into message_property in the transaction that accepts the message.
    def enqueue_many(self, target: str, bodies: Sequence[tuple[str | None, str]], *,
                     source: str | None, session_id: int | None, now: datetime,
                     trace_context: str | None = None,
                     search_paths: Sequence[str] = ()) -> list[int]:
        raise NotImplementedError

    def accept(self, target: str, body_class: str | None, body: str, *, source: str | None,
               session_id: int | None, now: datetime, idempotency_key: str | None,
               trace_context: str | None, waited: bool = False,
               durable: bool = True, search_paths: Sequence[str] = ()) -> Accepted:
        raise NotImplementedError

    def accept_many(self, intakes: Sequence[Intake]) -> list[Accepted]:
        """Accept every one of ``intakes`` in one durable transaction (a group commit), in
        order; each as :meth:`accept` would."""
        raise NotImplementedError

    def message(self, message_id: int) -> MessageRow | None:
        """One message as it is now (a waiter's look: one indexed read, no transaction)."""
        raise NotImplementedError

    def outcome(self, message_id: int) -> Outcome | None:
        """One message and its response's body, in one indexed read (a waiter's look once
        the message has ended)."""
        raise NotImplementedError

    def _outcome(self, values: Sequence[Any]) -> Outcome:
        n = len(COLUMNS)
        return Outcome(self._row(values[:n]), values[n] is not None, values[n + 1],
                       values[n + 2])

    @staticmethod
    def _row(values: Sequence[Any]) -> MessageRow:
        return MessageRow(**dict(zip(COLUMNS, values)))

    def complete_many(self, completions: Sequence[Completion], *, now: datetime,
                      durable: bool = False) -> list[int]:
        """Record ``completions`` in one transaction of the hot path's own; the ids
        completed (the others' claims were lost: nothing was written for them)."""
        raise NotImplementedError

    def complete_in(self, conn: Any, completions: Sequence[Completion], *, now: datetime
                    ) -> tuple[dict[int, int | None], list[int]]:
        """Record ``completions`` in the transaction open on driver connection ``conn`` (a
        caller's, which commits it with other writes); message id → response id of those
        completed, and the ids of those someone waits for (for :meth:`after_completion`,
        once committed)."""
        raise NotImplementedError

    def end_attempt_in(self, conn: Any, ending: AttemptEnding) -> int:
        """Record ``ending`` in the transaction open on driver connection ``conn`` (a
        caller's); how many attempts it ended (0: the claim was lost)."""
        raise NotImplementedError

    @staticmethod
    def _claim_params(target: str, *, owner: str, now: datetime, lease_seconds: float,
                      limit: int, fifo: bool, begin: bool, enabled: bool,
                      alone: bool = True, server: str | None = None) -> dict[str, Any]:
        return {"target": target, "owner": owner, "now": now,
                "expires": now + timedelta(seconds=lease_seconds), "limit": limit,
                "fifo": fifo, "begin": begin, "enabled": enabled, "no_id": _NO_ID,
                "alone": alone, "server": storable(server) if begin else None}

    def claim(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
              limit: int, fifo: bool, begin: bool, enabled: bool,
              held: Sequence[int] = (), alone: bool = True,
              server: str | None = None) -> list[Claimed]:
        """``alone``: the claimer holds no other message of ``target``, so it may take a
        suspect (see :func:`isolate`); ``server``: recorded with each attempt begun."""
        raise NotImplementedError

    def execute(self, sql: str, params: dict[str, Any]) -> list[Any]:
        """One statement of another store module (a rate-limit slot), written for this
        driver (``:name`` placeholders on SQLite, ``%(name)s`` on PostgreSQL), in a
        transaction of its own whose commit does not wait for the disk; its rows."""
        raise NotImplementedError

    def complete_and_claim(self, completions: Sequence[Completion], *, now: datetime,
                           **claim: Any) -> tuple[list[int], list[Claimed]]:
        """:meth:`complete_many`, then :meth:`claim` (keyword arguments as it takes them)."""
        done = self.complete_many(completions, now=now) if completions else []
        return done, self.claim(now=now, **claim)


def _close_all(idle: dict[bool, list[Any]]) -> None:
    for connections in idle.values():
        while connections:
            _close(connections.pop())


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # already broken
        pass
