"""PostgreSQL: every step one statement on an autocommit connection, a transition one
transaction."""
from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engine.store import properties
from engine.store.hotpath.base import (
    Accepted,
    Applied,
    Claimed,
    Completion,
    HotPath,
    Intake,
    Outcome,
    check_claim,
    completion_of,
    event_params,
    separate_end,
    transition_params,
)
from engine.store.notify import Announcement
from engine.store.rows import MessageRow
from engine.store.statements import postgres as sql
from engine.store.statements.shared import COLUMNS
from engine.store.transition import Complete, Finish, Hold, Requeue, RetryAt, Transition


def _index(conn: Any, message_id: int, body: str, search_paths: Sequence[str]) -> None:
    """Insert the search-property rows of a message just accepted (in its transaction)."""
    if search_paths:
        rows = properties.extract(body, search_paths)
        if rows:
            with conn.cursor() as cur:
                cur.executemany(sql.INSERT_PROPERTY, properties.parameters(message_id, rows))


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


class PostgresHotPath(HotPath):
    """PostgreSQL: each step one statement on an autocommit connection; only intake commits
    are durable (a lost claim requeues, a lost completion is outcome unknown)."""

    parallel_commits = True

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
            return [int(r[0]) for r in self._run(sql.INSERT, params, durable=True)]
        with self._connection(True) as conn:
            def insert() -> list[int]:
                with conn.transaction():
                    ids = [int(r[0]) for r in
                           conn.execute(sql.INSERT, params, prepare=True).fetchall()]
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
        rows = self._run(sql.ACCEPT, params, durable=durable)
        if rows:
            return Accepted(int(rows[0][0]), int(rows[0][1]), True)
        found = self._run(sql.FIND_KEY, params)
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
                        rows = conn.execute(sql.ACCEPT, params, prepare=True).fetchall()
                        if not rows:  # the key is taken: by a commit, or by this batch
                            rows = conn.execute(sql.FIND_KEY, params).fetchall()
                            out.append(Accepted(int(rows[0][0]), int(rows[0][1]), False))
                        else:
                            out.append(Accepted(int(rows[0][0]), int(rows[0][1]), True))
                            _index(conn, int(rows[0][0]), i.body, i.search_paths)
                return out
            return self._guard(accept)

    def message(self, message_id: int) -> MessageRow | None:
        rows = self._run(sql.MESSAGE, {"id": message_id})
        return MessageRow(**dict(zip(COLUMNS, rows[0]))) if rows else None

    def outcome(self, message_id: int) -> Outcome | None:
        rows = self._run(sql.OUTCOME, {"id": message_id})
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
        # not durable, but a FIFO claim's commit flushes the WAL in order, carrying the
        # previous message's end with it, so a failover never resends that one after this
        rows = self._run(sql.CLAIM_FIFO if fifo else sql.CLAIM_ANY, params, durable=fifo)
        width = len(COLUMNS)
        return [Claimed(MessageRow(**dict(zip(COLUMNS, r[:width]))),
                        None if r[-1] is None else int(r[-1]), int(r[width]),
                        None if r[-1] is None else params["server"]) for r in rows]

    def complete_many(self, completions: Sequence[Completion], *, now: datetime,
                      durable: bool = False) -> list[int]:
        if not completions:
            return []
        rows = self._run(sql.COMPLETE, self._complete_params(completions, now),
                         durable=durable)
        # NOTIFY went with the commit; this process's waiters too
        self.after_completion(completions, [int(r[0]) for r in rows if r[1]])
        return [int(r[0]) for r in rows]

    def apply(self, transition: Transition) -> Applied:
        t = transition
        # a success, or an attempt's end alone, is recovered if lost (docs/architecture.md)
        durable = t.then is not None and not isinstance(t.then, Complete)
        with self._connection(durable) as conn:
            def run() -> Applied:
                with conn.transaction():
                    return self._apply(conn, t)
            applied = self._guard(run)
        # NOTIFY went with the commit; this process's waiters too
        if isinstance(t.then, Complete):
            self.after_completion([completion_of(t)], [t.message_id] if applied.waited else [])
        elif applied.waited and isinstance(t.then, Finish):
            self.on_waited_done([t.message_id])
        return applied

    def _apply(self, conn: Any, t: Transition) -> Applied:
        """Write ``t`` in ``conn``'s transaction, its guard first."""
        if isinstance(t.then, Complete):
            rows = conn.execute(sql.COMPLETE, self._complete_params([completion_of(t)], t.then.now),
                                prepare=True).fetchall()
            check_claim(len(rows), t.message_id, t.token)
            applied = (Applied(None, bool(rows[0][1]), None if rows[0][2] is None
                               else int(rows[0][2])) if rows else Applied(None, False))
        else:
            params = transition_params(t)
            rows = conn.execute(_STATEMENTS[type(t.then)], params, prepare=True).fetchall()
            check_claim(len(rows), t.message_id, t.token)
            applied = Applied(rows[0][1], bool(rows[0][2])) if rows else Applied(None, False)
            if isinstance(t.then, Hold) and t.then.begun is not None:
                conn.execute(sql.TAKE_BACK, params, prepare=True)
        end = separate_end(t)
        if end is not None:
            conn.execute(sql.END_ATTEMPTS, {"ends": json.dumps([{
                "attempt_id": end.attempt_id, "started_at": _time(end.started_at),
                "ended_at": _time(end.ended_at), "server": end.server, "outcome": end.outcome,
                "status_code": end.status_code, "error_text": end.error_text,
                "token": None}])}, prepare=True)
        if t.events:
            with conn.cursor() as cur:
                cur.executemany(sql.INSERT_EVENT, event_params(t.events))
        return applied

    @staticmethod
    def _complete_params(completions: Sequence[Completion], now: datetime) -> dict[str, Any]:
        document = json.dumps([
            {"id": c.message_id, "token": c.token, "attempt_id": c.attempt_id,
             "started_at": _time(c.started_at), "ended_at": _time(c.ended_at),
             "server": c.server, "body_class": c.response_class, "body": c.response_body}
            for c in completions])
        return {"completions": document, "now": now}


_STATEMENTS = {type(None): sql.ATTEMPT_ENDED, Requeue: sql.REQUEUE, Hold: sql.REQUEUE,
               RetryAt: sql.RETRY_AT, Finish: sql.FINISH}
