"""The store's hot path: intake, batch claims and group-committed completions, each one
prebuilt statement on a driver connection of its own (DESIGN.md §5, "Throughput").

Everything else in the store goes through SQLAlchemy Core. These few statements run for every
message, so they skip it: the SQL is written once per dialect, parameters are plain values,
and rows come back as tuples. :class:`SqliteHotPath` runs a step as one ``BEGIN IMMEDIATE``
transaction in-process; :class:`PostgresHotPath` runs each step as one statement on an
autocommit connection (a CTE where a step changes several tables), so a step costs one round
trip, with ``synchronous_commit`` off except where a promise rests on the commit.

Timestamps are aware UTC in and out; SQLite stores them as SQLAlchemy does (naive UTC text).
"""
from __future__ import annotations

import queue
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.pool import StaticPool

from engine.errors import StoreError
from engine.store.rows import MessageRow

MAX_IDLE_CONNECTIONS = 8  # driver connections kept open between steps, per store
_NO_ID = 2**62  # larger than any id: "no limit" in the FIFO head probe

_COLUMNS = ("id", "session_id", "source", "target", "kind", "body_class", "body", "status",
            "is_error", "error_text", "time_created", "time_processed", "time_completed",
            "corresponding_id", "retry_needed", "attempts", "first_attempt_at",
            "next_attempt_at", "claimed_by", "lease_expires_at", "claim_token", "trace_context")
_SELECT_COLUMNS = ", ".join(f"h.{c}" for c in _COLUMNS)
_TIMES = frozenset({"time_created", "time_processed", "time_completed", "first_attempt_at",
                    "next_attempt_at", "lease_expires_at"})

# The messages a claim may take. ``:fifo``: only the head of the queue, in order — queued
# messages older than any held by another claim (``:held``: those the claimer holds itself,
# which it delivers in order before these), up to the first that is not due yet. Otherwise any
# due queued message, oldest first. Either way nothing while the item is switched off by an
# operator (item_state), else as the production file says (``:enabled``). Two index probes
# on (target, status, id) find the head: never a scan of the queue.
_PICK = """
    SELECT q.id, q.attempts FROM message_header q
    WHERE q.target = :target AND q.status = 'Queued'
      AND coalesce((SELECT s.enabled FROM item_state s WHERE s.config_name = :target),
                   :enabled)
      AND (:fifo OR q.next_attempt_at IS NULL OR q.next_attempt_at <= :now)
      AND (NOT :fifo OR q.id < coalesce(
            (SELECT min(d.id) FROM message_header d
             WHERE d.target = :target AND d.status = 'Delivered' AND {not_held}), :no_id))
      AND (NOT :fifo OR q.id < coalesce(
            (SELECT min(w.id) FROM message_header w
             WHERE w.target = :target AND w.status = 'Queued' AND w.next_attempt_at > :now),
            :no_id))
    ORDER BY q.id LIMIT :limit"""

# Claim the picked messages: Delivered, leased to :owner, a new fencing token, and — when
# :begin — attempt 1 counted for those never attempted (its row is inserted alongside).
_CLAIM_SET = """
    status = 'Delivered', claimed_by = :owner, lease_expires_at = :expires,
    claim_token = h.claim_token + 1, time_processed = coalesce(h.time_processed, :now),
    attempts = CASE WHEN :begin AND h.attempts = 0 THEN 1 ELSE h.attempts END,
    first_attempt_at = CASE WHEN :begin AND h.attempts = 0 THEN :now
                            ELSE h.first_attempt_at END,
    next_attempt_at = CASE WHEN :begin AND h.attempts = 0 THEN NULL
                           ELSE h.next_attempt_at END"""

_INSERT_MESSAGE_COLUMNS = ("session_id, source, target, kind, body_class, body, status, is_error, "
                           "time_created, retry_needed, attempts, claim_token, "
                           "idempotency_key, trace_context")


@dataclass(frozen=True)
class Accepted:
    """A message taken in: its id and session, and False when an earlier message with the
    same idempotency key was found instead (nothing was created)."""

    id: int
    session_id: int
    created: bool


@dataclass(frozen=True)
class Claimed:
    """One claimed message and, when the claim began it, the id of its attempt 1."""

    row: MessageRow
    begun: int | None


@dataclass(frozen=True)
class Completion:
    """A successful attempt to record: the message's completion, its attempt's end and its
    response (if any), conditional on the claim ``token``."""

    message_id: int
    token: int
    attempt_id: int
    started_at: datetime
    ended_at: datetime
    server: str | None
    response_class: str | None
    response_body: str | None


class HotPath:
    """The per-message statements of one store. Subclasses bind them to a driver."""

    paramstyle_named = re.compile(r"(?<!:):(\w+)")

    def __init__(self, engine: Engine, translate: Callable[[BaseException], bool]) -> None:
        self._engine = engine
        self._is_driver_error = translate
        # idle connections by durability: commits that wait for the disk, and those that do not
        self._idle: dict[bool, queue.LifoQueue[Any]] = {True: queue.LifoQueue(),
                                                        False: queue.LifoQueue()}
        self._lock = threading.Lock()

    # -- connections ---------------------------------------------------------------------
    def _new_connection(self, durable: bool) -> Any:
        """A driver connection of our own, detached from SQLAlchemy's pool (it keeps the
        settings the engine's connect hooks gave it)."""
        raw = self._engine.raw_connection()
        conn = raw.driver_connection
        raw.detach()
        self._prepare(conn, durable)
        return conn

    def _prepare(self, conn: Any, durable: bool) -> None:
        """Per-dialect settings of a new hot-path connection whose commits are ``durable``
        (or not)."""

    @contextmanager
    def _connection(self, durable: bool = False) -> Iterator[Any]:
        if isinstance(self._engine.pool, StaticPool):  # one in-memory database: share it
            raw = self._guard(self._engine.raw_connection)
            try:
                yield raw.driver_connection
            finally:
                raw.close()
            return
        try:
            conn = self._idle[durable].get_nowait()
        except queue.Empty:
            conn = self._guard(lambda: self._new_connection(durable))
        try:
            yield conn
        except BaseException:
            _close(conn)  # its state is unknown: never reuse it
            raise
        if self._idle[durable].qsize() < MAX_IDLE_CONNECTIONS:
            self._idle[durable].put(conn)
        else:
            _close(conn)

    def _guard(self, func: Callable[[], Any]) -> Any:
        try:
            return func()
        except Exception as exc:
            if self._is_driver_error(exc):
                raise StoreError(f"database error: {exc}") from exc
            raise

    def dispose(self) -> None:
        for idle in self._idle.values():
            while True:
                try:
                    _close(idle.get_nowait())
                except queue.Empty:
                    break

    # -- steps (per dialect) ---------------------------------------------------------------
    def enqueue_many(self, target: str, bodies: Sequence[tuple[str | None, str]], *,
                     source: str | None, session_id: int | None, now: datetime) -> list[int]:
        raise NotImplementedError

    def accept(self, target: str, body_class: str | None, body: str, *, source: str | None,
               session_id: int | None, now: datetime, idempotency_key: str | None,
               trace_context: str | None) -> Accepted:
        raise NotImplementedError

    def complete_many(self, completions: Sequence[Completion], *, now: datetime) -> list[int]:
        raise NotImplementedError

    @staticmethod
    def _claim_params(target: str, *, owner: str, now: datetime, lease_seconds: float,
                      limit: int, fifo: bool, begin: bool, enabled: bool) -> dict[str, Any]:
        return {"target": target, "owner": owner, "now": now,
                "expires": now + timedelta(seconds=lease_seconds), "limit": limit,
                "fifo": fifo, "begin": begin, "enabled": enabled, "no_id": _NO_ID}

    def claim(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
              limit: int, fifo: bool, begin: bool, enabled: bool,
              held: Sequence[int] = ()) -> list[Claimed]:
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


# -- SQLite ------------------------------------------------------------------------------------
def _sqlite_time(value: datetime | None) -> str | None:
    """The text SQLAlchemy stores for an aware datetime on SQLite (naive UTC)."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def _parse_sqlite_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value).replace(tzinfo=timezone.utc)


class SqliteHotPath(HotPath):
    """SQLite: every step one ``BEGIN IMMEDIATE`` transaction; ``synchronous = FULL`` for
    the commits a promise rests on (an accepted message), NORMAL otherwise."""

    _INSERT = (f"INSERT INTO message_header (id, {_INSERT_MESSAGE_COLUMNS}) VALUES "
               "(:id, coalesce(:session_id, :id), :source, :target, 'request', :body_class, "
               ":body, 'Queued', 0, :now, 0, 0, 0, :key, :trace)")
    _FIND_KEY = ("SELECT id, session_id FROM message_header "
                 "WHERE target = :target AND idempotency_key = :key")
    _CLAIM = (f"UPDATE message_header AS h SET {_CLAIM_SET} "
              f"WHERE h.id IN (SELECT value FROM json_each(:ids)) "
              f"RETURNING {_SELECT_COLUMNS.replace('h.', '')}")
    _BEGIN = ("INSERT INTO message_attempt (message_id, attempt, started_at) "
              "SELECT value, 1, :now FROM json_each(:ids) RETURNING id, message_id")
    _COMPLETE = ("UPDATE message_header SET status = 'Completed', is_error = 0, "
                 "retry_needed = 0, next_attempt_at = NULL, time_completed = :now, "
                 "claimed_by = NULL, lease_expires_at = NULL, corresponding_id = :response_id, "
                 "first_attempt_at = CASE WHEN attempts = 1 THEN :started_at "
                 "ELSE first_attempt_at END "
                 "WHERE id = :message_id AND claim_token = :token AND status = 'Delivered' "
                 "RETURNING session_id, target, source")
    _END_ATTEMPT = ("UPDATE message_attempt SET started_at = :started_at, ended_at = :ended_at, "
                    "outcome = 'ok', server = :server WHERE id = :attempt_id")
    _RESPONSE = ("INSERT INTO message_header (id, session_id, source, target, kind, body_class, "
                 "body, status, is_error, time_created, time_processed, time_completed, "
                 "corresponding_id, retry_needed, attempts, claim_token) VALUES (:id, "
                 ":session_id, :source, :target, 'response', :body_class, :body, 'Completed', "
                 "0, :now, :now, :now, :request_id, 0, 0, 0)")

    def __init__(self, engine: Engine, translate: Callable[[BaseException], bool]) -> None:
        super().__init__(engine, translate)
        # This process's hot-path writers queue here rather than on SQLite's busy handler,
        # which sleeps and retries: a producer committing in a loop would starve the
        # dispatcher's claims for as long as it runs.
        self._write_lock = threading.Lock()

    @contextmanager
    def _transaction(self, *, durable: bool = False) -> Iterator[Any]:
        with self._write_lock, self._connection(durable) as conn:
            cur = conn.cursor()
            try:
                self._guard(lambda: cur.execute("BEGIN IMMEDIATE"))
                yield cur
                self._guard(lambda: cur.execute("COMMIT"))
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except Exception:  # noqa: BLE001 - no transaction left to roll back
                    pass
                raise
            finally:
                cur.close()

    def _prepare(self, conn: Any, durable: bool) -> None:
        conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")

    def execute(self, sql: str, params: dict[str, Any]) -> list[Any]:
        with self._transaction() as cur:
            return self._guard(lambda: cur.execute(sql, params).fetchall())

    def enqueue_many(self, target: str, bodies: Sequence[tuple[str | None, str]], *,
                     source: str | None, session_id: int | None, now: datetime) -> list[int]:
        stamp = _sqlite_time(now)
        with self._transaction(durable=True) as cur:
            def insert() -> list[int]:
                first = cur.execute("SELECT coalesce(max(id), 0) + 1 FROM message_header"
                                    ).fetchone()[0]
                ids = list(range(first, first + len(bodies)))
                cur.executemany(self._INSERT, [
                    {"id": new_id, "session_id": session_id, "source": source,
                     "target": target, "body_class": body_class, "body": body, "now": stamp,
                     "key": None, "trace": None}
                    for new_id, (body_class, body) in zip(ids, bodies)])
                return ids
            return self._guard(insert)

    def accept(self, target: str, body_class: str | None, body: str, *, source: str | None,
               session_id: int | None, now: datetime, idempotency_key: str | None,
               trace_context: str | None) -> Accepted:
        params = {"session_id": session_id, "source": source, "target": target,
                  "body_class": body_class, "body": body, "now": _sqlite_time(now),
                  "key": idempotency_key, "trace": trace_context}
        with self._transaction(durable=True) as cur:  # BEGIN IMMEDIATE: no racing insert
            def accept() -> Accepted:
                if idempotency_key is not None:
                    found = cur.execute(self._FIND_KEY, params).fetchone()
                    if found is not None:
                        return Accepted(int(found[0]), int(found[1]), False)
                params["id"] = cur.execute("SELECT coalesce(max(id), 0) + 1 "
                                           "FROM message_header").fetchone()[0]
                cur.execute(self._INSERT, params)
                return Accepted(params["id"], session_id or params["id"], True)
            return self._guard(accept)

    _PICK = _PICK.format(not_held="d.id NOT IN (SELECT value FROM json_each(:held))")

    def claim(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
              limit: int, fifo: bool, begin: bool, enabled: bool,
              held: Sequence[int] = ()) -> list[Claimed]:
        return self.complete_and_claim((), now=now, target=target, owner=owner,
                                       lease_seconds=lease_seconds, limit=limit, fifo=fifo,
                                       begin=begin, enabled=enabled, held=held)[1]

    def complete_many(self, completions: Sequence[Completion], *, now: datetime) -> list[int]:
        with self._transaction() as cur:
            return self._guard(lambda: self._complete(cur, completions, _sqlite_time(now)))

    def complete_and_claim(self, completions: Sequence[Completion], *, now: datetime,
                           **claim: Any) -> tuple[list[int], list[Claimed]]:
        """:meth:`complete_many` then :meth:`claim`, in one transaction."""
        params = self._claim_params(now=now, **{k: v for k, v in claim.items() if k != "held"})
        params["now"], params["expires"] = _sqlite_time(now), _sqlite_time(params["expires"])
        params["held"] = _json_ids(claim.get("held", ()))
        with self._transaction() as cur:
            def step() -> tuple[list[int], list[Claimed]]:
                done = self._complete(cur, completions, params["now"]) if completions else []
                return done, self._claim(cur, params)
            return self._guard(step)

    def _claim(self, cur: Any, params: dict[str, Any]) -> list[Claimed]:
        picked = cur.execute(self._PICK, params).fetchall()
        if not picked:
            return []
        params["ids"] = _json_ids([p[0] for p in picked])
        rows = sorted((self._row(r) for r in cur.execute(self._CLAIM, params)),
                      key=lambda r: r.id)
        fresh = [i for i, attempts in picked if params["begin"] and attempts == 0]
        begun: dict[int, int] = {}
        if fresh:
            begun = {m: a for a, m in cur.execute(
                self._BEGIN, {"now": params["now"], "ids": _json_ids(fresh)})}
        return [Claimed(r, begun.get(r.id)) for r in rows]

    def _complete(self, cur: Any, completions: Sequence[Completion], stamp: str | None
                  ) -> list[int]:
        done: list[int] = []
        next_id = None
        for c in completions:
            response_id = None
            if c.response_body is not None:
                if next_id is None:
                    next_id = cur.execute("SELECT coalesce(max(id), 0) + 1 "
                                          "FROM message_header").fetchone()[0]
                response_id, next_id = next_id, next_id + 1
            request = cur.execute(self._COMPLETE, {
                "now": stamp, "response_id": response_id, "message_id": c.message_id,
                "token": c.token, "started_at": _sqlite_time(c.started_at)}).fetchone()
            if request is None:  # the claim was lost: record nothing
                if response_id is not None:
                    next_id = response_id
                continue
            cur.execute(self._END_ATTEMPT, {
                "started_at": _sqlite_time(c.started_at), "ended_at": _sqlite_time(c.ended_at),
                "server": c.server, "attempt_id": c.attempt_id})
            if response_id is not None:
                session_id, request_target, request_source = request
                cur.execute(self._RESPONSE, {
                    "id": response_id, "session_id": session_id, "source": request_target,
                    "target": request_source or "", "body_class": c.response_class,
                    "body": c.response_body, "now": stamp, "request_id": c.message_id})
            done.append(c.message_id)
        return done

    @staticmethod
    def _row(values: Sequence[Any]) -> MessageRow:
        data = dict(zip(_COLUMNS, values))
        for name in _TIMES:
            data[name] = _parse_sqlite_time(data[name])
        data["is_error"] = bool(data["is_error"])
        data["retry_needed"] = bool(data["retry_needed"])
        return MessageRow(**data)


def _json_ids(ids: Sequence[int]) -> str:
    return "[" + ",".join(str(int(i)) for i in ids) + "]"


# -- PostgreSQL --------------------------------------------------------------------------------
def _pg(sql: str) -> str:
    """``:name`` placeholders as psycopg's ``%(name)s`` (and ``%`` escaped)."""
    return HotPath.paramstyle_named.sub(r"%(\1)s", sql.replace("%", "%%"))


class PostgresHotPath(HotPath):
    """PostgreSQL: each step one statement on an autocommit connection. Intake commits are
    durable; claims and completions are not (``synchronous_commit = off``): a lost claim puts
    the message back in its queue, a lost completion leaves its attempt open, which the next
    delivery treats as outcome unknown."""

    _INSERT = _pg(
        f"WITH n AS (SELECT nextval('message_header_id_seq') AS id, b.ord, b.body_class, b.body "
        f"FROM unnest(:body_classes::text[], :bodies::text[]) WITH ORDINALITY "
        f"AS b(body_class, body, ord)), "
        f"ins AS (INSERT INTO message_header (id, {_INSERT_MESSAGE_COLUMNS}) "
        f"SELECT n.id, coalesce(:session_id, n.id), :source, :target, 'request', n.body_class, "
        f"n.body, 'Queued', false, :now, false, 0, 0, NULL, NULL FROM n ORDER BY n.ord "
        f"RETURNING id) "
        f"SELECT ins.id, pg_notify('encore_queue', :target) FROM ins ORDER BY ins.id")
    # The unique index on (target, idempotency_key) decides between racing duplicates: the
    # loser inserts nothing and reads the winner's row once it has committed.
    _ACCEPT = _pg(
        f"WITH n AS (SELECT nextval('message_header_id_seq') AS id), "
        f"ins AS (INSERT INTO message_header (id, {_INSERT_MESSAGE_COLUMNS}) "
        f"SELECT n.id, coalesce(:session_id, n.id), :source, :target, 'request', :body_class, "
        f":body, 'Queued', false, :now, false, 0, 0, :key, :trace FROM n "
        f"ON CONFLICT (target, idempotency_key) DO NOTHING RETURNING id, session_id) "
        f"SELECT ins.id, ins.session_id, pg_notify('encore_queue', :target) FROM ins")
    _FIND_KEY = _pg("SELECT id, session_id FROM message_header "
                    "WHERE target = :target AND idempotency_key = :key")
    _CLAIM = (
        "WITH pick AS ({pick} FOR UPDATE{skip}), "
        f"claimed AS (UPDATE message_header h SET {_CLAIM_SET} FROM pick "
        f"WHERE h.id = pick.id AND h.status = 'Queued' "
        f"RETURNING {_SELECT_COLUMNS}, :begin AND pick.attempts = 0 AS fresh), "
        "begun AS (INSERT INTO message_attempt (message_id, attempt, started_at) "
        "SELECT id, 1, :now FROM claimed WHERE fresh RETURNING id, message_id) "
        "SELECT claimed.*, begun.id FROM claimed LEFT JOIN begun "
        "ON begun.message_id = claimed.id ORDER BY claimed.id")
    # A FIFO head locked for a moment (an operator's action) is waited for, never skipped.
    _PICK = _PICK.format(not_held="d.id <> ALL(:held::bigint[])")
    _CLAIM_FIFO = _pg(_CLAIM.format(pick=_PICK, skip=""))
    _CLAIM_ANY = _pg(_CLAIM.format(pick=_PICK, skip=" SKIP LOCKED"))
    _COMPLETE = _pg(
        "WITH d AS (SELECT c.*, CASE WHEN c.has_response "
        "THEN nextval('message_header_id_seq') END AS response_id "
        "FROM unnest(:ids::bigint[], :tokens::bigint[], :attempt_ids::bigint[], "
        ":started::timestamptz[], :ended::timestamptz[], :servers::text[], "
        ":classes::text[], :bodies::text[], :has::boolean[]) "
        "AS c(id, token, attempt_id, started_at, ended_at, server, body_class, body, "
        "has_response)), "
        "req AS (UPDATE message_header h SET status = 'Completed', is_error = false, "
        "retry_needed = false, next_attempt_at = NULL, time_completed = :now, "
        "claimed_by = NULL, lease_expires_at = NULL, corresponding_id = d.response_id, "
        "first_attempt_at = CASE WHEN h.attempts = 1 THEN d.started_at "
        "ELSE h.first_attempt_at END FROM d WHERE h.id = d.id AND h.claim_token = d.token "
        "AND h.status = 'Delivered' "
        "RETURNING h.id, h.session_id, h.target, h.source), "
        "att AS (UPDATE message_attempt a SET started_at = d.started_at, "
        "ended_at = d.ended_at, outcome = 'ok', server = d.server FROM d JOIN req "
        "ON req.id = d.id WHERE a.id = d.attempt_id RETURNING a.id), "
        "resp AS (INSERT INTO message_header (id, session_id, source, target, kind, "
        "body_class, body, status, is_error, time_created, time_processed, time_completed, "
        "corresponding_id, retry_needed, attempts, claim_token) SELECT d.response_id, "
        "req.session_id, req.target, coalesce(req.source, ''), 'response', d.body_class, "
        "d.body, 'Completed', false, :now, :now, :now, d.id, false, 0, 0 FROM d JOIN req "
        "ON req.id = d.id WHERE d.has_response RETURNING id) "
        "SELECT req.id FROM req")

    def _prepare(self, conn: Any, durable: bool) -> None:
        conn.rollback()
        conn.autocommit = True
        conn.execute(f"SET synchronous_commit TO {'ON' if durable else 'OFF'}")

    def _run(self, sql: str, params: dict[str, Any], *, durable: bool = False) -> list[Any]:
        with self._connection(durable) as conn:
            return self._guard(lambda: conn.execute(sql, params, prepare=True).fetchall())

    def execute(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return self._run(sql, params)

    def enqueue_many(self, target: str, bodies: Sequence[tuple[str | None, str]], *,
                     source: str | None, session_id: int | None, now: datetime) -> list[int]:
        rows = self._run(self._INSERT, {
            "body_classes": [b[0] for b in bodies], "bodies": [b[1] for b in bodies],
            "session_id": session_id, "source": source, "target": target, "now": now},
            durable=True)
        return [int(r[0]) for r in rows]

    def accept(self, target: str, body_class: str | None, body: str, *, source: str | None,
               session_id: int | None, now: datetime, idempotency_key: str | None,
               trace_context: str | None) -> Accepted:
        params = {"session_id": session_id, "source": source, "target": target,
                  "body_class": body_class, "body": body, "now": now, "key": idempotency_key,
                  "trace": trace_context}
        rows = self._run(self._ACCEPT, params, durable=True)
        if rows:
            return Accepted(int(rows[0][0]), int(rows[0][1]), True)
        found = self._run(self._FIND_KEY, params)
        if not found:  # the winner's transaction rolled back meanwhile: try again
            return self.accept(target, body_class, body, source=source, session_id=session_id,
                               now=now, idempotency_key=idempotency_key,
                               trace_context=trace_context)
        return Accepted(int(found[0][0]), int(found[0][1]), False)

    def claim(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
              limit: int, fifo: bool, begin: bool, enabled: bool,
              held: Sequence[int] = ()) -> list[Claimed]:
        params = self._claim_params(target, owner=owner, now=now, lease_seconds=lease_seconds,
                                    limit=limit, fifo=fifo, begin=begin, enabled=enabled)
        params["held"] = list(held)
        rows = self._run(self._CLAIM_FIFO if fifo else self._CLAIM_ANY, params)
        width = len(_COLUMNS)
        return [Claimed(MessageRow(**dict(zip(_COLUMNS, r[:width]))),
                        None if r[-1] is None else int(r[-1])) for r in rows]

    def complete_many(self, completions: Sequence[Completion], *, now: datetime) -> list[int]:
        if not completions:
            return []
        rows = self._run(self._COMPLETE, {
            "ids": [c.message_id for c in completions], "tokens": [c.token for c in completions],
            "attempt_ids": [c.attempt_id for c in completions],
            "started": [c.started_at for c in completions],
            "ended": [c.ended_at for c in completions],
            "servers": [c.server for c in completions],
            "classes": [c.response_class for c in completions],
            "bodies": [c.response_body for c in completions],
            "has": [c.response_body is not None for c in completions], "now": now})
        return [int(r[0]) for r in rows]


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - already broken
        pass
