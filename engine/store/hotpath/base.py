"""What both dialects' hot paths share: the rows a step returns, a transition's parameters and
the driver connection pool."""
from __future__ import annotations

import dataclasses
import itertools
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from engine.errors import ClaimLost, StoreError
from engine.store.database import connection_looks_dead, reason_of
from engine.store.rows import MessageRow
from engine.store.statements.shared import COLUMNS
from engine.store.statuses import Status
from engine.store.text import storable
from engine.store.transition import (
    AttemptEnd,
    Complete,
    Finish,
    Hold,
    Requeue,
    RetryAt,
    Transition,
)

if TYPE_CHECKING:
    from engine.store.eventlog import Event

T = TypeVar("T")

MAX_IDLE_CONNECTIONS = 8  # driver connections kept open between steps, per store
_NO_ID = 2**62  # larger than any id: "no limit" in the FIFO head probe


def isolate(picked: Sequence[Any], alone: bool) -> list[Any]:
    """:data:`~engine.store.statements.shared.ISOLATE` on ``(id, attempts, deliveries)`` rows."""
    if picked and picked[0][2] > 0:
        return list(picked[:1]) if alone else []
    return list(itertools.takewhile(lambda p: p[2] == 0, picked))


@dataclass(frozen=True)
class Accepted:
    """A message taken in; ``created`` False: an earlier one with its idempotency key."""

    id: int
    session_id: int
    created: bool


@dataclass(frozen=True)
class Intake:
    """One message to accept."""

    target: str
    body_class: str | None
    body: str
    source: str | None
    session_id: int | None
    now: datetime
    idempotency_key: str | None
    trace_context: str | None
    waited: bool = False
    search_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """A message and its response, read in one statement; ``response`` False: none."""

    row: MessageRow
    response: bool
    response_class: str | None
    response_body: str | None


@dataclass(frozen=True)
class Claimed:
    """One claimed message, its attempt 1 if the claim began it, and ``interrupted``: its
    deliveries that never ended before this claim."""

    row: MessageRow
    begun: int | None
    interrupted: int = 0
    server: str | None = None


@dataclass(frozen=True)
class Grant:
    """An item's leave to claim a new message as it is accepted (a *direct take*)."""

    owner: str
    lease_seconds: float
    begin: bool
    fifo: bool
    enabled: bool
    server: str | None = None


class Taker(Protocol):
    """What takes messages directly: ``reserve()`` a worker, then ``take`` or ``release``."""

    def reserve(self) -> Grant | None: ...

    def take(self, claimed: Claimed) -> None: ...

    def release(self) -> None: ...


@dataclass(frozen=True)
class Completion:
    """A successful attempt to record, fenced by ``token``. ``attempt_id`` None: already
    ended; ``started_at`` None: its start stays."""

    message_id: int
    token: int
    attempt_id: int | None
    started_at: datetime | None
    ended_at: datetime | None
    server: str | None
    response_class: str | None
    response_body: str | None
    urgent: bool = False  # someone waits for the message


@dataclass(frozen=True)
class Applied:
    """What a transition changed: its message's ``target``, whether someone ``waited`` for it,
    and the id of a ``Completed`` one's response (None: none)."""

    target: str | None  # None: no message changed (an unfenced transition of none)
    waited: bool
    response_id: int | None = None


def check_claim(changed: int, ident: int, token: int | None, what: str = "message") -> None:
    """Raise ClaimLost when a write conditional on ``token`` changed nothing."""
    if token is not None and not changed:
        raise ClaimLost(f"{what} {ident}: its claim (token {token}) is no longer this "
                        "worker's; another daemon has taken it over")


def completion_of(t: Transition) -> Completion:
    """The :class:`Completion` that writes ``t`` (whose next step is :class:`Complete`), with
    its attempt's end when that was a success (a failure's is written on its own)."""
    assert isinstance(t.then, Complete) and t.token is not None
    a, then = t.attempt, t.then
    if a is None or a.outcome != "ok":
        return Completion(t.message_id, t.token, None, None if a is None else a.started_at,
                          None, None, then.response_class, then.response_body)
    return Completion(t.message_id, t.token, a.attempt_id, a.started_at, a.ended_at, a.server,
                      then.response_class, then.response_body)


def transition_params(t: Transition) -> dict[str, Any]:
    """The parameters of ``t``'s statement (REQUEUE, RETRY_AT, FINISH or ATTEMPT_ENDED);
    times as they are (each dialect converts them)."""
    then = t.then
    params: dict[str, Any] = {
        "id": t.message_id, "token": t.token, "taken_back": 0, "due": None, "retry": False,
        "started_at": t.attempt.started_at if t.attempt is not None else None}
    if isinstance(then, Requeue):
        params.update(due=then.due, retry=then.retry)
    elif isinstance(then, Hold):
        params.update(due=then.until, taken_back=int(then.begun is not None),
                      begun=then.begun)
    elif isinstance(then, RetryAt):
        params["due"] = then.due
    elif isinstance(then, Finish):
        params.update(status=str(then.status), is_error=then.status == Status.ERROR,
                      error_text=storable(then.error_text), now=then.now)
    return params


def separate_end(t: Transition) -> AttemptEnd | None:
    """The attempt end ``t`` writes on its own, its texts storable: all but a success's, which
    COMPLETE writes."""
    a = t.attempt
    if a is None or (isinstance(t.then, Complete) and a.outcome == "ok"):
        return None
    return dataclasses.replace(a, server=storable(a.server), error_text=storable(a.error_text))


def event_params(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The rows of INSERT_EVENT for ``events``."""
    return [dataclasses.asdict(e) for e in events]


class Connector(Protocol):
    """What hands a hot path its driver connections (SQLAlchemy, or :mod:`engine.store.lite`)."""

    def raw_connection(self) -> Any: ...


class HotPath:
    """The per-message statements of one store; subclasses bind them to a driver.

    After committing completions someone waits for, it calls ``on_completed(responses)``
    then ``on_waited_done(ids)``."""

    def __init__(self, engine: Connector, translate: Callable[[BaseException], bool], *,
                 shared: bool = False) -> None:
        """``shared``: ``engine`` holds one connection for everyone (in-memory database)."""
        self._engine = engine
        self.on_waited_done: Callable[[list[int]], object] = lambda ids: None
        self.on_completed: Callable[[dict[int, tuple[str | None, str | None]]], object] = \
            lambda responses: None
        self._is_driver_error = translate
        # lists, not queue.Queue: append and pop are atomic without a lock
        self._idle: dict[bool, list[Any]] = {True: [], False: []}
        weakref.finalize(self, _close_all, self._idle)
        self._shared = shared

    def after_completion(self, completions: Sequence[Completion], waited: list[int]) -> None:
        """Hand the responses of the ``waited`` completions over, then announce them."""
        if not waited:
            return
        ids = set(waited)
        self.on_completed({c.message_id: (c.response_class, c.response_body)
                           for c in completions if c.message_id in ids})
        self.on_waited_done(waited)

    direct_takes = False
    parallel_commits = False

    def accept_claimed(self, target: str, body_class: str | None, body: str, *,
                       source: str | None, session_id: int | None, now: datetime,
                       idempotency_key: str | None, trace_context: str | None,
                       durable: bool, grant: Grant) -> tuple[Accepted, Claimed | None]:
        raise NotImplementedError

    def _new_connection(self, durable: bool) -> Any:
        """A driver connection of our own, detached from SQLAlchemy's pool."""
        raw = self._engine.raw_connection()
        conn = raw.driver_connection
        raw.detach()
        try:
            self._prepare(conn, durable)
        except BaseException:
            _close(conn)
            raise
        return conn

    def _prepare(self, conn: Any, durable: bool) -> None:
        """Per-dialect settings of a new hot-path connection."""

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
                if connection_looks_dead(conn):  # a failover
                    _close(conn)
                    conn = None
        try:
            yield conn
        except BaseException:
            lost = getattr(conn, "broken", False)
            _close(conn)  # its state is unknown
            if lost:  # the idle ones went with the same server
                _close_all(self._idle)
            raise
        if len(idle) < MAX_IDLE_CONNECTIONS:
            idle.append(conn)
        else:
            _close(conn)

    def _guard(self, func: Callable[[], T]) -> T:
        """``func()``, a driver error raised as StoreError."""
        try:
            return func()
        except Exception as exc:
            if self._is_driver_error(exc):
                raise StoreError(f"database error: {reason_of(exc)}") from exc
            raise

    def dispose(self) -> None:
        _close_all(self._idle)

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
        """Accept ``intakes`` in order, in one durable transaction."""
        raise NotImplementedError

    def message(self, message_id: int) -> MessageRow | None:
        """One message as it is now."""
        raise NotImplementedError

    def outcome(self, message_id: int) -> Outcome | None:
        """One message and its response's body, in one read."""
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
        """Record ``completions`` in a transaction of its own; the ids completed."""
        raise NotImplementedError

    def apply(self, transition: Transition) -> Applied:
        """Write ``transition`` in one transaction of its own (ClaimLost, nothing written, if
        its guard fails), then hand over and announce a waited-for end."""
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
        """``alone``: the claimer holds no other message of ``target`` (see :func:`isolate`)."""
        raise NotImplementedError

    def execute(self, sql: str, params: dict[str, Any]) -> list[Any]:
        """One statement of another store module for this driver's placeholders, in a
        non-durable transaction of its own; its rows."""
        raise NotImplementedError

    def complete_and_claim(self, completions: Sequence[Completion], *, now: datetime,
                           **claim: Any) -> tuple[list[int], list[Claimed]]:
        """:meth:`complete_many`, then :meth:`claim`."""
        done = self.complete_many(completions, now=now) if completions else []
        return done, self.claim(now=now, **claim)


def _close_all(idle: dict[bool, list[Any]]) -> None:
    for connections in idle.values():
        while connections:
            _close(connections.pop())


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        pass
