"""SQLite: every step one ``BEGIN IMMEDIATE`` transaction in-process, or one statement."""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from engine.store import properties
from engine.store.hotpath.base import (
    CLAIM_SET,
    COLUMNS,
    INSERT_MESSAGE_COLUMNS,
    PICK_ANY,
    PICK_FIFO,
    SELECT_COLUMNS,
    TIMES,
    Accepted,
    Claimed,
    Completion,
    Connector,
    Grant,
    HotPath,
    Intake,
    Outcome,
    isolate,
)
from engine.store.rows import MessageRow
from engine.store.text import storable

# The caller an idempotency key belongs to (docs/security.md): an API token's holder, whose
# messages' source is "api:<name>", or '' — the production itself (the command line,
# services, business processes). PostgreSQL's statements use the same expression.
_CALLER = "CASE WHEN substr(:source, 1, 4) = 'api:' THEN :source ELSE '' END"


def _sqlite_time(value: datetime | None) -> str | None:
    """The text SQLAlchemy stores for an aware datetime on SQLite (naive UTC, to the
    microsecond; ``isoformat`` with the offset cut off costs half of ``strftime``)."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(" ", "microseconds")[:26]


def _index(cur: Any, message_id: int, body: str, search_paths: Sequence[str]) -> None:
    """Insert the search-property rows of a message just accepted (in its transaction)."""
    if search_paths:
        rows = properties.extract(body, search_paths)
        if rows:
            cur.executemany(properties.INSERT_SQL, properties.parameters(message_id, rows))


def _parse_sqlite_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value).replace(tzinfo=UTC)


class SqliteHotPath(HotPath):
    """SQLite: every step one ``BEGIN IMMEDIATE`` transaction, an intake one statement in
    autocommit mode; ``synchronous = FULL`` for an accepted message, NORMAL otherwise.

    A claim that begins attempts (an idempotent item's) does not wait for the disk: lost in
    a crash of the machine, the claim goes with it and the message is delivered afresh,
    which an idempotent item allows (docs/architecture.md makes durable only accepted messages and
    the starts of non-idempotent attempts; a process killed keeps every commit in the log)."""

    _INSERT = (f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}) VALUES "
               "(:id, coalesce(:session_id, :id), :source, :target, 'request', :body_class, "
               ":body, 'Queued', 0, :now, 0, 0, 0, :key, :trace, 0)")
    # intake of one message: its id drawn in the statement, so that it is one step (and
    # read back as the row id: no RETURNING row, so one call into the driver, not three)
    # (the key's caller, an API token's holder or '' for the production: see _CALLER)
    _ACCEPT = (f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}, idempotency_caller) "
               "SELECT n.id, coalesce(:session_id, n.id), :source, :target, 'request', "
               ":body_class, :body, 'Queued', 0, :now, 0, 0, 0, :key, :trace, :waited, "
               f"{_CALLER} "
               "FROM (SELECT coalesce(max(id), 0) + 1 AS id FROM message_header) AS n")
    _FIND_KEY = ("SELECT id, session_id FROM message_header "
                 f"WHERE target = :target AND idempotency_caller = {_CALLER} "
                 "AND idempotency_key = :key")
    _CLAIM = (f"UPDATE message_header AS h SET {CLAIM_SET} "
              f"WHERE h.id IN (SELECT value FROM json_each(:ids)) "
              f"RETURNING {SELECT_COLUMNS.replace('h.', '')}")
    _BEGIN = ("INSERT INTO message_attempt (message_id, attempt, started_at, server) "
              "SELECT value, 1, :now, :server FROM json_each(:ids) RETURNING id, message_id")
    _COMPLETE = ("UPDATE message_header SET status = 'Completed', is_error = 0, "
                 "retry_needed = 0, next_attempt_at = NULL, time_completed = :now, "
                 "claimed_by = NULL, lease_expires_at = NULL, corresponding_id = :response_id, "
                 "first_attempt_at = CASE WHEN attempts = 1 THEN :started_at "
                 "ELSE first_attempt_at END "
                 "WHERE id = :message_id AND claim_token = :token AND status = 'Delivered' "
                 "RETURNING session_id, target, source, waited")
    _END_ATTEMPT = ("UPDATE message_attempt SET started_at = :started_at, ended_at = :ended_at, "
                    "outcome = 'ok', server = :server WHERE id = :attempt_id")
    # Set-based forms of the statements above, for a batch given as one JSON array: one call
    # into the driver for the whole batch instead of one or more per message, each of which
    # hands the GIL back and must win it again while the write lock is held (a no-op drain
    # spent 3-20 % less CPU a message, BENCHMARKS.md). SQLite's JSON functions end a string
    # at a NUL character, so a batch with one in its text goes the one-by-one way.
    # many intakes without an idempotency key or search properties: one autocommit statement,
    # ids drawn in order from max(id) + 1 (the last one read back as the row id); each row
    # is [session_id, source, target, body_class, body, now, trace, waited]
    _ACCEPT_MANY = (f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}, "
                    "idempotency_caller) "
                    "SELECT n.id + c.key, coalesce(c.value ->> 0, n.id + c.key), "
                    "c.value ->> 1, c.value ->> 2, 'request', c.value ->> 3, c.value ->> 4, "
                    "'Queued', 0, c.value ->> 5, 0, 0, 0, NULL, c.value ->> 6, c.value ->> 7, "
                    "CASE WHEN substr(c.value ->> 1, 1, 4) = 'api:' THEN c.value ->> 1 "
                    "ELSE '' END "
                    "FROM (SELECT coalesce(max(id), 0) + 1 AS id FROM message_header) AS n, "
                    "json_each(:rows) AS c ORDER BY c.key")
    # completions without a response; each row is [message_id, token, started_at]
    _COMPLETE_MANY = ("UPDATE message_header AS h SET status = 'Completed', is_error = 0, "
                      "retry_needed = 0, next_attempt_at = NULL, time_completed = :now, "
                      "claimed_by = NULL, lease_expires_at = NULL, corresponding_id = NULL, "
                      "first_attempt_at = CASE WHEN h.attempts = 1 THEN c.value ->> 2 "
                      "ELSE h.first_attempt_at END "
                      "FROM json_each(:rows) AS c "
                      "WHERE h.id = c.value ->> 0 AND h.claim_token = c.value ->> 1 "
                      "AND +h.status = 'Delivered' "
                      "RETURNING id, waited")
    # each row is [attempt_id, started_at, ended_at, server]
    _END_ATTEMPTS = ("UPDATE message_attempt AS a SET started_at = c.value ->> 1, "
                     "ended_at = c.value ->> 2, outcome = 'ok', server = c.value ->> 3 "
                     "FROM json_each(:rows) AS c WHERE a.id = c.value ->> 0")
    _RESPONSE = ("INSERT INTO message_header (id, session_id, source, target, kind, body_class, "
                 "body, status, is_error, time_created, time_processed, time_completed, "
                 "corresponding_id, retry_needed, attempts, claim_token) VALUES (:id, "
                 ":session_id, :source, :target, 'response', :body_class, :body, 'Completed', "
                 "0, :now, :now, :now, :request_id, 0, 0, 0)")

    def __init__(self, engine: Connector, translate: Callable[[BaseException], bool], *,
                 shared: bool = False) -> None:
        super().__init__(engine, translate, shared=shared)
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
                except Exception:  # no transaction left to roll back
                    pass
                raise
            finally:
                cur.close()

    def _prepare(self, conn: Any, durable: bool) -> None:
        conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")

    def execute(self, sql: str, params: dict[str, Any]) -> list[Any]:
        with self._transaction() as cur:
            return list(self._guard(lambda: cur.execute(sql, params).fetchall()))

    def enqueue_many(self, target: str, bodies: Sequence[tuple[str | None, str]], *,
                     source: str | None, session_id: int | None, now: datetime,
                     trace_context: str | None = None,
                     search_paths: Sequence[str] = ()) -> list[int]:
        stamp = _sqlite_time(now)
        with self._transaction(durable=True) as cur:
            def insert() -> list[int]:
                first = cur.execute("SELECT coalesce(max(id), 0) + 1 FROM message_header"
                                    ).fetchone()[0]
                ids = list(range(first, first + len(bodies)))
                cur.executemany(self._INSERT, [
                    {"id": new_id, "session_id": session_id, "source": source,
                     "target": target, "body_class": body_class, "body": body, "now": stamp,
                     "key": None, "trace": trace_context}
                    for new_id, (body_class, body) in zip(ids, bodies)])
                for new_id, (_, body) in zip(ids, bodies):
                    _index(cur, new_id, body, search_paths)
                return ids
            return self._guard(insert)

    def accept(self, target: str, body_class: str | None, body: str, *, source: str | None,
               session_id: int | None, now: datetime, idempotency_key: str | None,
               trace_context: str | None, waited: bool = False,
               durable: bool = True, search_paths: Sequence[str] = ()) -> Accepted:
        params = {"session_id": session_id, "source": source, "target": target,
                  "body_class": body_class, "body": body, "now": _sqlite_time(now),
                  "key": idempotency_key, "trace": trace_context, "waited": int(waited)}
        if idempotency_key is None and not search_paths:
            # one statement, its own transaction: SQLite takes the write lock as it starts
            # (as BEGIN IMMEDIATE would) and commits as it ends — one call into the driver,
            # not five, each of which hands the GIL back and must wait to take it again
            with self._write_lock, self._connection(durable) as conn:
                new_id = self._guard(lambda: conn.execute(self._ACCEPT, params).lastrowid)
            return Accepted(new_id, new_id if session_id is None else session_id, True)
        with self._transaction(durable=durable) as cur:  # BEGIN IMMEDIATE: no racing insert
            def accept() -> Accepted:
                found = (cur.execute(self._FIND_KEY, params).fetchone()
                         if idempotency_key is not None else None)
                if found is not None:
                    return Accepted(int(found[0]), int(found[1]), False)
                new_id = cur.execute(self._ACCEPT, params).lastrowid
                _index(cur, new_id, body, search_paths)
                return Accepted(new_id, new_id if session_id is None else session_id, True)
            return self._guard(accept)

    # a new message claimed as it is inserted (a direct take): Delivered, leased to :owner,
    # token 1, one delivery, attempt 1 begun with :begin — as CLAIM_SET would claim it —
    # if the item is not switched off and, FIFO, has nothing queued or delivered ahead
    _ACCEPT_CLAIMED = (
        f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}, idempotency_caller, "
        "claimed_by, lease_expires_at, time_processed, deliveries, first_attempt_at) "
        "SELECT n.id, coalesce(:session_id, n.id), :source, :target, 'request', "
        ":body_class, :body, 'Delivered', 0, :now, 0, :begin, 1, :key, :trace, 1, "
        f"{_CALLER}, :owner, :expires, :now, 1, CASE WHEN :begin THEN :now END "
        "FROM (SELECT coalesce(max(id), 0) + 1 AS id FROM message_header) AS n "
        "WHERE coalesce((SELECT s.enabled FROM item_state s WHERE s.config_name = :target), "
        ":enabled) AND NOT (:fifo AND EXISTS (SELECT 1 FROM message_header q "
        "WHERE q.target = :target AND q.status IN ('Queued', 'Delivered'))) "
        f"RETURNING {', '.join(COLUMNS)}")
    direct_takes = True
    _BEGIN_ONE = ("INSERT INTO message_attempt (message_id, attempt, started_at, server) "
                  "VALUES (:id, 1, :now, :server) RETURNING id")

    def accept_claimed(self, target: str, body_class: str | None, body: str, *,
                       source: str | None, session_id: int | None, now: datetime,
                       idempotency_key: str | None, trace_context: str | None,
                       durable: bool, grant: Grant) -> tuple[Accepted, Claimed | None]:
        """Accept a waited-for message and, as ``grant`` allows, claim it in the same
        transaction (None: it could not be claimed — the item is switched off, or FIFO with
        a message ahead — and is queued as any other; or the ``idempotency_key`` names an
        earlier message, which is returned, ``created`` False, and nothing is made)."""
        stamp = _sqlite_time(now)
        server = storable(grant.server) if grant.begin else None
        params = {"session_id": session_id, "source": source, "target": target,
                  "body_class": body_class, "body": body, "now": stamp,
                  "key": idempotency_key,
                  "trace": trace_context, "waited": 1, "owner": grant.owner,
                  "expires": _sqlite_time(now + timedelta(seconds=grant.lease_seconds)),
                  "begin": int(grant.begin), "fifo": int(grant.fifo),
                  "enabled": int(grant.enabled)}
        with self._transaction(durable=durable) as cur:
            def accept() -> tuple[Accepted, Any, int | None]:
                found = (cur.execute(self._FIND_KEY, params).fetchone()
                         if idempotency_key is not None else None)
                if found is not None:
                    return Accepted(int(found[0]), int(found[1]), False), None, None
                raw = cur.execute(self._ACCEPT_CLAIMED, params).fetchone()
                if raw is None:
                    new_id = cur.execute(self._ACCEPT, params).lastrowid
                    return Accepted(new_id, new_id if session_id is None else session_id,
                                    True), None, None
                begun = (cur.execute(self._BEGIN_ONE, {"id": raw[0], "now": stamp,
                                                       "server": server})
                         .fetchone()[0] if grant.begin else None)
                return Accepted(raw[0], raw[1], True), raw, begun
            accepted, raw, begun = self._guard(accept)
        if raw is None:
            return accepted, None
        return accepted, Claimed(self._row(raw), begun, 0, server if begun else None)

    def accept_many(self, intakes: Sequence[Intake]) -> list[Accepted]:
        if not any(i.idempotency_key is not None or i.search_paths or _has_nul(
                i.source, i.target, i.body_class, i.body, i.trace_context) for i in intakes):
            rows = json.dumps([[i.session_id, i.source, i.target, i.body_class, i.body,
                                _sqlite_time(i.now), i.trace_context, int(i.waited)]
                               for i in intakes])
            with self._write_lock, self._connection(True) as conn:  # one statement: atomic
                last = self._guard(lambda: conn.execute(self._ACCEPT_MANY,
                                                        {"rows": rows}).lastrowid)
            first = last - len(intakes) + 1
            return [Accepted(first + n, first + n if i.session_id is None else i.session_id,
                             True) for n, i in enumerate(intakes)]
        with self._transaction(durable=True) as cur:  # BEGIN IMMEDIATE: no racing insert
            def accept() -> list[Accepted]:
                out = []
                for i in intakes:
                    params = {"session_id": i.session_id, "source": i.source,
                              "target": i.target, "body_class": i.body_class, "body": i.body,
                              "now": _sqlite_time(i.now), "key": i.idempotency_key,
                              "trace": i.trace_context, "waited": int(i.waited)}
                    found = (cur.execute(self._FIND_KEY, params).fetchone()
                             if i.idempotency_key is not None else None)
                    if found is not None:
                        out.append(Accepted(int(found[0]), int(found[1]), False))
                        continue
                    new_id = cur.execute(self._ACCEPT, params).lastrowid
                    _index(cur, new_id, i.body, i.search_paths)
                    out.append(Accepted(new_id, new_id if i.session_id is None
                                        else i.session_id, True))
                return out
            return self._guard(accept)

    def message(self, message_id: int) -> MessageRow | None:
        with self._connection() as conn:
            found = self._guard(lambda: conn.execute(self._MESSAGE, {"id": message_id})
                                .fetchone())
        return None if found is None else self._row(found)

    def outcome(self, message_id: int) -> Outcome | None:
        with self._connection() as conn:
            found = self._guard(lambda: conn.execute(self._OUTCOME, {"id": message_id})
                                .fetchone())
        return None if found is None else self._outcome(found)

    _PICK_ANY = PICK_ANY
    # The parked-message probe must range over (target, status, next_attempt_at), not scan
    # the whole queue in id order, which SQLite's planner would otherwise choose.
    _PICK_FIFO = PICK_FIFO.format(
        not_held="d.id NOT IN (SELECT value FROM json_each(:held))",
        due_index="INDEXED BY ix_message_header_due")

    def claim(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
              limit: int, fifo: bool, begin: bool, enabled: bool,
              held: Sequence[int] = (), alone: bool = True,
              server: str | None = None) -> list[Claimed]:
        return self.complete_and_claim((), now=now, target=target, owner=owner,
                                       lease_seconds=lease_seconds, limit=limit, fifo=fifo,
                                       begin=begin, enabled=enabled, held=held,
                                       alone=alone, server=server)[1]

    def complete_many(self, completions: Sequence[Completion], *, now: datetime,
                      durable: bool = False) -> list[int]:
        waited: list[int] = []
        with self._transaction(durable=durable) as cur:
            done = self._guard(lambda: self._complete(cur, completions, _sqlite_time(now),
                                                      waited))
        self._waited_completed(completions, waited)
        return done

    def complete_and_claim(self, completions: Sequence[Completion], *, now: datetime,
                           **claim: Any) -> tuple[list[int], list[Claimed]]:
        """:meth:`complete_many` then :meth:`claim`, in one transaction."""
        params = self._claim_params(now=now, **{k: v for k, v in claim.items() if k != "held"})
        params["now"], params["expires"] = _sqlite_time(now), _sqlite_time(params["expires"])
        params["held"] = _json_ids(claim.get("held", ()))
        waited: list[int] = []
        with self._transaction(durable=False) as cur:
            def step() -> tuple[list[int], list[Any], dict[int, int], dict[int, int]]:
                done = (self._complete(cur, completions, params["now"], waited)
                        if completions else [])
                return done, *self._claim(cur, params)
            done, raw, begun, before = self._guard(step)
        self._waited_completed(completions, waited)
        # rows are made after the commit: the write lock is held for the SQL alone
        rows = sorted((self._row(r) for r in raw), key=lambda r: r.id)
        server = params["server"]
        return done, [Claimed(r, begun.get(r.id), before[r.id],
                              server if r.id in begun else None) for r in rows]

    def _claim(self, cur: Any, params: dict[str, Any]
               ) -> tuple[list[Any], dict[int, int], dict[int, int]]:
        """The claimed rows as the driver returns them, message id → attempt begun, and
        message id → deliveries counted before the claim (a suspect comes alone)."""
        pick = self._PICK_FIFO if params["fifo"] else self._PICK_ANY
        picked = isolate(cur.execute(pick, params).fetchall(), params["alone"])
        if not picked:
            return [], {}, {}
        params["ids"] = _json_ids([p[0] for p in picked])
        raw = cur.execute(self._CLAIM, params).fetchall()
        fresh = [i for i, attempts, _ in picked if params["begin"] and attempts == 0]
        begun: dict[int, int] = {}
        if fresh:
            begun = {m: a for a, m in cur.execute(
                self._BEGIN, {"now": params["now"], "ids": _json_ids(fresh),
                              "server": params["server"]})}
        return raw, begun, {i: deliveries for i, _, deliveries in picked}

    def _complete(self, cur: Any, completions: Sequence[Completion], stamp: str | None,
                  waited: list[int]) -> list[int]:
        """Record ``completions``; the ids completed (``waited``: those someone waits for,
        appended)."""
        plain: list[Completion] = []  # no response: the set-based statements
        others: list[Completion] = []
        for c in completions:
            (plain if c.response_body is None and not _has_nul(c.server) else others).append(c)
        if len(plain) > 1 and len({c.message_id for c in plain}) == len(plain):
            return self._complete_plain(cur, completions, plain, others, stamp, waited)
        return self._complete_each(cur, completions, stamp, waited)

    def _complete_plain(self, cur: Any, completions: Sequence[Completion],
                        plain: list[Completion], others: list[Completion], stamp: str | None,
                        waited: list[int]) -> list[int]:
        """:meth:`_complete` of the completions without a response in two statements for
        them all (the others one by one)."""
        ended = {int(i): bool(w) for i, w in cur.execute(self._COMPLETE_MANY, {
            "now": stamp, "rows": json.dumps([[c.message_id, c.token, _sqlite_time(c.started_at)]
                                              for c in plain])}).fetchall()}
        if ended:
            cur.execute(self._END_ATTEMPTS, {"rows": json.dumps([
                [c.attempt_id, _sqlite_time(c.started_at), _sqlite_time(c.ended_at), c.server]
                for c in plain if c.message_id in ended])})
        done_others = set(self._complete_each(cur, others, stamp, waited)) if others else set()
        done = []
        for c in completions:
            if c.message_id in done_others:
                done.append(c.message_id)
            elif c.message_id in ended:
                done.append(c.message_id)
                if ended[c.message_id]:
                    waited.append(c.message_id)
        return done

    def _complete_each(self, cur: Any, completions: Sequence[Completion], stamp: str | None,
                       waited: list[int]) -> list[int]:
        """:meth:`_complete`, a few statements per completion."""
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
            if request[3]:
                waited.append(c.message_id)
            if response_id is not None:
                session_id, request_target, request_source, _ = request
                cur.execute(self._RESPONSE, {
                    "id": response_id, "session_id": session_id, "source": request_target,
                    "target": request_source or "", "body_class": c.response_class,
                    "body": c.response_body, "now": stamp, "request_id": c.message_id})
            done.append(c.message_id)
        return done

    @staticmethod
    def _row(values: Sequence[Any]) -> MessageRow:
        data = dict(zip(COLUMNS, values))
        for name in TIMES:
            data[name] = _parse_sqlite_time(data[name])
        data["is_error"] = bool(data["is_error"])
        data["retry_needed"] = bool(data["retry_needed"])
        data["waited"] = bool(data["waited"])
        return MessageRow(**data)


def _has_nul(*texts: str | None) -> bool:
    """True if one of ``texts`` holds a NUL character (see the set-based statements)."""
    return any(t is not None and "\x00" in t for t in texts)



def _json_ids(ids: Sequence[int]) -> str:
    return "[" + ",".join(str(int(i)) for i in ids) + "]"
