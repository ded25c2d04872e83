"""PostgreSQL: every step one statement on an autocommit connection."""
from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engine.store import properties
from engine.store.hotpath.base import (
    CLAIM_SET,
    COLUMNS,
    INSERT_MESSAGE_COLUMNS,
    ISOLATE,
    PICK_ANY,
    PICK_FIFO,
    SELECT_COLUMNS,
    Accepted,
    Claimed,
    Completion,
    HotPath,
    Intake,
    Outcome,
)
from engine.store.notify import Announcement
from engine.store.rows import MessageRow

# The caller an idempotency key belongs to: an API token's holder ("api:<name>", the source)
# or '' for the production (as SQLite's _CALLER; the source typed once, as text).
_CALLER = "CASE WHEN substr(:source::text, 1, 4) = 'api:' THEN :source::text ELSE '' END"


def _index(conn: Any, message_id: int, body: str, search_paths: Sequence[str]) -> None:
    """Insert the search-property rows of a message just accepted (in its transaction)."""
    if search_paths:
        rows = properties.extract(body, search_paths)
        if rows:
            with conn.cursor() as cur:
                cur.executemany(_INSERT_PROPERTY, properties.parameters(message_id, rows))


def _pg(sql: str) -> str:
    """``:name`` placeholders as psycopg's ``%(name)s`` (and ``%`` escaped)."""
    return HotPath.paramstyle_named.sub(r"%(\1)s", sql.replace("%", "%%"))


_INSERT_PROPERTY = _pg(properties.INSERT_SQL)


class PostgresHotPath(HotPath):
    """PostgreSQL: each step one statement on an autocommit connection. Intake commits are
    durable; claims and completions are not (``synchronous_commit = off``): a lost claim puts
    the message back in its queue, a lost completion leaves its attempt open, which the next
    delivery treats as outcome unknown."""

    parallel_commits = True

    _INSERT = _pg(
        f"WITH n AS (SELECT nextval('message_header_id_seq') AS id, b.ord, b.body_class, b.body "
        f"FROM unnest(:body_classes::text[], :bodies::text[]) WITH ORDINALITY "
        f"AS b(body_class, body, ord)), "
        f"ins AS (INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}) "
        f"SELECT n.id, coalesce(:session_id, n.id), :source, :target, 'request', n.body_class, "
        f"n.body, 'Queued', false, :now, false, 0, 0, NULL, :trace::text, false FROM n "
        f"ORDER BY n.ord "
        f"RETURNING id) "
        f"SELECT ins.id, pg_notify('encore_queue', :note) FROM ins ORDER BY ins.id")
    # The unique index on (target, idempotency_caller, idempotency_key) decides between
    # racing duplicates: the loser inserts nothing and reads the winner's row once it has
    # committed. The caller is an API token's holder or '' for the production (_CALLER).
    _ACCEPT = _pg(
        f"WITH n AS (SELECT nextval('message_header_id_seq') AS id), "
        f"ins AS (INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}, "
        f"idempotency_caller) "
        f"SELECT n.id, coalesce(:session_id, n.id), :source::text, :target, 'request', "
        f":body_class, :body, 'Queued', false, :now, false, 0, 0, :key, :trace, :waited, "
        f"{_CALLER} FROM n "
        f"ON CONFLICT (target, idempotency_caller, idempotency_key) "
        f"WHERE idempotency_key IS NOT NULL "
        f"DO NOTHING RETURNING id, session_id) "
        f"SELECT ins.id, ins.session_id, pg_notify('encore_queue', :note) FROM ins")
    _FIND_KEY = _pg("SELECT id, session_id FROM message_header "
                    f"WHERE target = :target AND idempotency_caller = {_CALLER} "
                    "AND idempotency_key = :key")
    # The id of each attempt begun is drawn with the claim, so the rows come back without a
    # join of the claimed messages to their new attempts; each with its count of deliveries
    # before the claim (a suspect comes alone: ISOLATE).
    _CLAIM = (
        "WITH cand AS ({pick} FOR UPDATE{skip}), "
        f"pick AS ({ISOLATE}), "
        f"claimed AS (UPDATE message_header h SET {CLAIM_SET} FROM pick "
        f"WHERE h.id = pick.id "
        f"RETURNING {SELECT_COLUMNS}, pick.deliveries AS interrupted, "
        "CASE WHEN :begin AND pick.attempts = 0 "
        "THEN nextval('message_attempt_id_seq') END AS begun), "
        "begun AS (INSERT INTO message_attempt (id, message_id, attempt, started_at, server) "
        "SELECT begun, id, 1, :now, :server::text FROM claimed WHERE begun IS NOT NULL) "
        "SELECT * FROM claimed ORDER BY id")
    # A FIFO head locked for a moment (an operator's action) is waited for, never skipped.
    # One statement per kind of claim, so that each gets a plan of its own (a generic plan
    # of one statement for both would have to scan).
    _CLAIM_FIFO = _pg(_CLAIM.format(
        pick=PICK_FIFO.format(not_held="d.id <> ALL(:held::bigint[])", due_index=""),
        skip=""))
    _CLAIM_ANY = _pg(_CLAIM.format(pick=PICK_ANY, skip=" SKIP LOCKED"))
    # The completions come as one JSON document: json.dumps encodes it in C, where psycopg
    # would dump nine arrays element by element in Python (a fifth of a dispatcher's time).
    _COMPLETE = _pg(
        "WITH d AS (SELECT c.*, CASE WHEN c.body IS NOT NULL "
        "THEN nextval('message_header_id_seq') END AS response_id "
        "FROM json_to_recordset(:completions::json) AS c(id bigint, token bigint, "
        "attempt_id bigint, started_at timestamptz, ended_at timestamptz, server text, "
        "body_class text, body text)), "
        "req AS (UPDATE message_header h SET status = 'Completed', is_error = false, "
        "retry_needed = false, next_attempt_at = NULL, time_completed = :now, "
        "claimed_by = NULL, lease_expires_at = NULL, corresponding_id = d.response_id, "
        "first_attempt_at = CASE WHEN h.attempts = 1 THEN d.started_at "
        "ELSE h.first_attempt_at END FROM d WHERE h.id = d.id AND h.claim_token = d.token "
        "AND h.status = 'Delivered' "
        "RETURNING h.id, h.session_id, h.target, h.source, h.waited), "
        "att AS (UPDATE message_attempt a SET started_at = d.started_at, "
        "ended_at = d.ended_at, outcome = 'ok', server = d.server FROM d JOIN req "
        "ON req.id = d.id WHERE a.id = d.attempt_id RETURNING a.id), "
        "resp AS (INSERT INTO message_header (id, session_id, source, target, kind, "
        "body_class, body, status, is_error, time_created, time_processed, time_completed, "
        "corresponding_id, retry_needed, attempts, claim_token) SELECT d.response_id, "
        "req.session_id, req.target, coalesce(req.source, ''), 'response', d.body_class, "
        "d.body, 'Completed', false, :now, :now, :now, d.id, false, 0, 0 FROM d JOIN req "
        "ON req.id = d.id WHERE d.body IS NOT NULL RETURNING id) "
        # the end of a message someone waits for is announced with its commit
        "SELECT req.id, req.waited, CASE WHEN req.waited THEN pg_notify('encore_done', "
        "'{\"kind\":\"done\",\"ids\":[' || req.id || ']}') END FROM req")

    def _prepare(self, conn: Any, durable: bool) -> None:
        conn.rollback()
        conn.autocommit = True
        conn.execute(f"SET synchronous_commit TO {'ON' if durable else 'OFF'}")

    def _run(self, sql: str, params: dict[str, Any], *, durable: bool = False) -> list[Any]:
        with self._connection(durable) as conn:
            return list(self._guard(lambda: conn.execute(sql, params, prepare=True).fetchall()))

    def execute(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return self._run(sql, params)

    def enqueue_many(self, target: str, bodies: Sequence[tuple[str | None, str]], *,
                     source: str | None, session_id: int | None, now: datetime,
                     trace_context: str | None = None,
                     search_paths: Sequence[str] = ()) -> list[int]:
        params = {
            "body_classes": [b[0] for b in bodies], "bodies": [b[1] for b in bodies],
            "session_id": session_id, "source": source, "target": target, "now": now,
            "trace": trace_context, "note": Announcement.work(target).to_json()}
        if not search_paths:
            return [int(r[0]) for r in self._run(self._INSERT, params, durable=True)]
        with self._connection(True) as conn:
            def insert() -> list[int]:
                with conn.transaction():
                    ids = [int(r[0]) for r in
                           conn.execute(self._INSERT, params, prepare=True).fetchall()]
                    for new_id, (_, body) in zip(ids, bodies):
                        _index(conn, new_id, body, search_paths)
                return ids
            return self._guard(insert)

    def accept(self, target: str, body_class: str | None, body: str, *, source: str | None,
               session_id: int | None, now: datetime, idempotency_key: str | None,
               trace_context: str | None, waited: bool = False,
               durable: bool = True, search_paths: Sequence[str] = ()) -> Accepted:
        if search_paths:  # the message and its properties in one transaction
            return self.accept_many([Intake(target, body_class, body, source, session_id, now,
                                            idempotency_key, trace_context, waited,
                                            tuple(search_paths))])[0]
        params = {"session_id": session_id, "source": source, "target": target,
                  "body_class": body_class, "body": body, "now": now, "key": idempotency_key,
                  "trace": trace_context, "waited": waited,
                  "note": Announcement.work(target, urgent=waited).to_json()}
        rows = self._run(self._ACCEPT, params, durable=durable)
        if rows:
            return Accepted(int(rows[0][0]), int(rows[0][1]), True)
        found = self._run(self._FIND_KEY, params)
        if not found:  # the winner's transaction rolled back meanwhile: try again
            return self.accept(target, body_class, body, source=source, session_id=session_id,
                               now=now, idempotency_key=idempotency_key,
                               trace_context=trace_context, waited=waited, durable=durable)
        return Accepted(int(found[0][0]), int(found[0][1]), False)

    def accept_many(self, intakes: Sequence[Intake]) -> list[Accepted]:
        with self._connection(True) as conn:
            def accept() -> list[Accepted]:
                out = []
                with conn.transaction():
                    for i in intakes:
                        params = {"session_id": i.session_id, "source": i.source,
                                  "target": i.target, "body_class": i.body_class,
                                  "body": i.body, "now": i.now, "key": i.idempotency_key,
                                  "trace": i.trace_context, "waited": i.waited,
                                  "note": Announcement.work(i.target,
                                                            urgent=i.waited).to_json()}
                        rows = conn.execute(self._ACCEPT, params, prepare=True).fetchall()
                        if not rows:  # the key is taken: by a commit, or by this batch
                            rows = conn.execute(self._FIND_KEY, params).fetchall()
                            out.append(Accepted(int(rows[0][0]), int(rows[0][1]), False))
                        else:
                            out.append(Accepted(int(rows[0][0]), int(rows[0][1]), True))
                            _index(conn, int(rows[0][0]), i.body, i.search_paths)
                return out
            return self._guard(accept)

    _MESSAGE = _pg(HotPath._MESSAGE)

    def message(self, message_id: int) -> MessageRow | None:
        rows = self._run(self._MESSAGE, {"id": message_id})
        return MessageRow(**dict(zip(COLUMNS, rows[0]))) if rows else None

    _OUTCOME = _pg(HotPath._OUTCOME)

    def outcome(self, message_id: int) -> Outcome | None:
        rows = self._run(self._OUTCOME, {"id": message_id})
        return self._outcome(rows[0]) if rows else None

    def claim(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
              limit: int, fifo: bool, begin: bool, enabled: bool,
              held: Sequence[int] = (), alone: bool = True,
              server: str | None = None) -> list[Claimed]:
        params = self._claim_params(target, owner=owner, now=now, lease_seconds=lease_seconds,
                                    limit=limit, fifo=fifo, begin=begin, enabled=enabled,
                                    alone=alone, server=server)
        # an array literal: psycopg would dump a list element by element in Python
        params["held"] = "{" + ",".join(str(int(i)) for i in held) + "}"
        # not durable, even when it begins attempts (an idempotent item's): lost in a crash
        # of the server, the claim goes with it and the message is delivered afresh. A FIFO
        # claim is: the WAL is flushed (and the synchronous standby confirms) in order, so its
        # commit carries the end of the message before it, written without waiting — else a
        # crash or failover of the server could lose that end after this message was sent,
        # and the one before would be sent again after it. (SQLite loses no commit when a
        # process dies, only when the machine does.)
        rows = self._run(self._CLAIM_FIFO if fifo else self._CLAIM_ANY, params, durable=fifo)
        width = len(COLUMNS)
        return [Claimed(MessageRow(**dict(zip(COLUMNS, r[:width]))),
                        None if r[-1] is None else int(r[-1]), int(r[width]),
                        None if r[-1] is None else params["server"]) for r in rows]

    def complete_many(self, completions: Sequence[Completion], *, now: datetime,
                      durable: bool = False) -> list[int]:
        if not completions:
            return []
        document = json.dumps([
            {"id": c.message_id, "token": c.token, "attempt_id": c.attempt_id,
             "started_at": c.started_at.isoformat(), "ended_at": c.ended_at.isoformat(),
             "server": c.server, "body_class": c.response_class, "body": c.response_body}
            for c in completions])
        rows = self._run(self._COMPLETE, {"completions": document, "now": now},
                         durable=durable)
        # NOTIFY went with the commit; this process's waiters too
        self._waited_completed(completions, [int(r[0]) for r in rows if r[1]])
        return [int(r[0]) for r in rows]
