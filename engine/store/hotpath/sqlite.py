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
    Accepted,
    Applied,
    Claimed,
    Completion,
    Connector,
    Grant,
    HotPath,
    Intake,
    Outcome,
    check_claim,
    completion_of,
    event_params,
    isolate,
    separate_end,
    transition_params,
)
from engine.store.rows import MessageRow
from engine.store.statements import sqlite as sql
from engine.store.statements.shared import COLUMNS, TIMES
from engine.store.text import storable
from engine.store.transition import AttemptEnd, Complete, Finish, Hold, Requeue, RetryAt, Transition


def _sqlite_time(value: datetime | None) -> str | None:
    """The text SQLAlchemy stores for an aware datetime on SQLite (naive UTC)."""
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
    """SQLite: every step one ``BEGIN IMMEDIATE`` transaction, an intake one autocommit
    statement; ``synchronous = FULL`` only for an accepted message (a lost claim is simply
    delivered afresh)."""

    def __init__(self, engine: Connector, translate: Callable[[BaseException], bool], *,
                 shared: bool = False) -> None:
        super().__init__(engine, translate, shared=shared)
        # writers queue here, not on SQLite's busy handler, which would let a looping
        # producer starve the dispatcher's claims
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
                first = cur.execute(sql.NEXT_ID).fetchone()[0]
                ids = list(range(first, first + len(bodies)))
                cur.executemany(sql.INSERT, [
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
            # one autocommit statement: one driver call, the write lock taken as it starts
            with self._write_lock, self._connection(durable) as conn:
                new_id = self._guard(lambda: conn.execute(sql.ACCEPT, params).lastrowid)
            return Accepted(new_id, new_id if session_id is None else session_id, True)
        with self._transaction(durable=durable) as cur:  # BEGIN IMMEDIATE: no racing insert
            def accept() -> Accepted:
                found = (cur.execute(sql.FIND_KEY, params).fetchone()
                         if idempotency_key is not None else None)
                if found is not None:
                    return Accepted(int(found[0]), int(found[1]), False)
                new_id = cur.execute(sql.ACCEPT, params).lastrowid
                _index(cur, new_id, body, search_paths)
                return Accepted(new_id, new_id if session_id is None else session_id, True)
            return self._guard(accept)

    direct_takes = True

    def accept_claimed(self, target: str, body_class: str | None, body: str, *,
                       source: str | None, session_id: int | None, now: datetime,
                       idempotency_key: str | None, trace_context: str | None,
                       durable: bool, grant: Grant) -> tuple[Accepted, Claimed | None]:
        """Accept a waited-for message and, as ``grant`` allows, claim it in the same
        transaction (claimed None: switched off, FIFO behind another, or an existing key)."""
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
                found = (cur.execute(sql.FIND_KEY, params).fetchone()
                         if idempotency_key is not None else None)
                if found is not None:
                    return Accepted(int(found[0]), int(found[1]), False), None, None
                raw = cur.execute(sql.ACCEPT_CLAIMED, params).fetchone()
                if raw is None:
                    new_id = cur.execute(sql.ACCEPT, params).lastrowid
                    return Accepted(new_id, new_id if session_id is None else session_id,
                                    True), None, None
                begun = (cur.execute(sql.BEGIN_ONE, {"id": raw[0], "now": stamp,
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
                last = self._guard(lambda: conn.execute(sql.ACCEPT_MANY,
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
                    found = (cur.execute(sql.FIND_KEY, params).fetchone()
                             if i.idempotency_key is not None else None)
                    if found is not None:
                        out.append(Accepted(int(found[0]), int(found[1]), False))
                        continue
                    new_id = cur.execute(sql.ACCEPT, params).lastrowid
                    _index(cur, new_id, i.body, i.search_paths)
                    out.append(Accepted(new_id, new_id if i.session_id is None
                                        else i.session_id, True))
                return out
            return self._guard(accept)

    def message(self, message_id: int) -> MessageRow | None:
        with self._connection() as conn:
            found = self._guard(lambda: conn.execute(sql.MESSAGE, {"id": message_id})
                                .fetchone())
        return None if found is None else self._row(found)

    def outcome(self, message_id: int) -> Outcome | None:
        with self._connection() as conn:
            found = self._guard(lambda: conn.execute(sql.OUTCOME, {"id": message_id})
                                .fetchone())
        return None if found is None else self._outcome(found)

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
        self.after_completion(completions, waited)
        return list(done)

    def complete_and_claim(self, completions: Sequence[Completion], *, now: datetime,
                           **claim: Any) -> tuple[list[int], list[Claimed]]:
        """:meth:`complete_many` then :meth:`claim`, in one transaction."""
        params = self._claim_params(now=now, **{k: v for k, v in claim.items() if k != "held"})
        params["now"], params["expires"] = _sqlite_time(now), _sqlite_time(params["expires"])
        params["held"] = _json_ids(claim.get("held", ()))
        waited: list[int] = []
        with self._transaction(durable=False) as cur:
            def step() -> tuple[list[int], list[Any], dict[int, int], dict[int, int]]:
                done = (list(self._complete(cur, completions, params["now"], waited))
                        if completions else [])
                return done, *self._claim(cur, params)
            done, raw, begun, before = self._guard(step)
        self.after_completion(completions, waited)
        # rows are made after the commit: the write lock is held for the SQL alone
        rows = sorted((self._row(r) for r in raw), key=lambda r: r.id)
        server = params["server"]
        return done, [Claimed(r, begun.get(r.id), before[r.id],
                              server if r.id in begun else None) for r in rows]

    def _claim(self, cur: Any, params: dict[str, Any]
               ) -> tuple[list[Any], dict[int, int], dict[int, int]]:
        """The claimed rows, message id → attempt begun, and message id → prior deliveries."""
        pick = sql.PICK_FIFO_HEAD if params["fifo"] else sql.PICK_ANY
        picked = isolate(cur.execute(pick, params).fetchall(), params["alone"])
        if not picked:
            return [], {}, {}
        params["ids"] = _json_ids([p[0] for p in picked])
        raw = cur.execute(sql.CLAIM, params).fetchall()
        fresh = [i for i, attempts, _ in picked if params["begin"] and attempts == 0]
        begun: dict[int, int] = {}
        if fresh:
            begun = {m: a for a, m in cur.execute(
                sql.BEGIN, {"now": params["now"], "ids": _json_ids(fresh),
                              "server": params["server"]})}
        return raw, begun, {i: deliveries for i, _, deliveries in picked}

    def apply(self, transition: Transition) -> Applied:
        waited: list[int] = []
        with self._transaction() as cur:
            applied = self._guard(lambda: self._apply(cur, transition, waited))
        if isinstance(transition.then, Complete):
            self.after_completion([completion_of(transition)], waited)
        elif waited:
            self.on_waited_done(waited)
        return applied

    def _apply(self, cur: Any, t: Transition, waited: list[int]) -> Applied:
        """Write ``t`` on ``cur``, its guard first (``waited``: its id, if waited for)."""
        if isinstance(t.then, Complete):
            done = self._complete(cur, [completion_of(t)], _sqlite_time(t.then.now), waited)
            check_claim(len(done), t.message_id, t.token)
            applied = Applied(None, bool(waited), done.get(t.message_id))
        else:
            params = transition_params(t)
            for name in ("due", "started_at", "now"):
                params[name] = _sqlite_time(params.get(name))
            found = cur.execute(_STATEMENTS[type(t.then)], params).fetchone()
            check_claim(0 if found is None else 1, t.message_id, t.token)
            applied = Applied(None, False) if found is None else Applied(found[1], bool(found[2]))
            if applied.waited and isinstance(t.then, Finish):
                waited.append(t.message_id)
            if isinstance(t.then, Hold) and t.then.begun is not None:
                cur.execute(sql.TAKE_BACK, params)
        end = separate_end(t)
        if end is not None:
            cur.execute(sql.END_ATTEMPTS, {"rows": json.dumps([_end_row(end)])})
        if t.events:
            cur.executemany(sql.INSERT_EVENT, [
                {**row, "time_logged": _sqlite_time(row["time_logged"])}
                for row in event_params(t.events)])
        return applied

    def _complete(self, cur: Any, completions: Sequence[Completion], stamp: str | None,
                  waited: list[int]) -> dict[int, int | None]:
        """Record ``completions``; message id → response id of those completed (``waited``:
        those someone waits for, appended)."""
        done: dict[int, int | None] = {}
        rest = list(completions)
        while rest:
            batch: dict[int, Completion] = {}
            again: list[Completion] = []
            for c in rest:
                if c.message_id in batch:
                    again.append(c)
                else:
                    batch[c.message_id] = c
            done.update(self._complete_batch(cur, list(batch.values()), stamp, waited))
            rest = again
        return done

    def _complete_batch(self, cur: Any, batch: list[Completion], stamp: str | None,
                        waited: list[int]) -> dict[int, int | None]:
        """:meth:`_complete` of distinct messages, one statement per table for the batch."""
        responses: dict[int, int] = {}
        next_id = None
        for c in batch:
            if c.response_body is not None:
                if next_id is None:
                    next_id = int(cur.execute(sql.NEXT_ID).fetchone()[0])
                responses[c.message_id], next_id = next_id, next_id + 1
        rows = json.dumps([[c.message_id, c.token, _sqlite_time(c.started_at),
                            responses.get(c.message_id)] for c in batch])
        ended = {int(r[0]): r for r in
                 cur.execute(sql.COMPLETE, {"now": stamp, "rows": rows}).fetchall()}
        if not ended:  # every claim was lost: nothing recorded
            return {}
        ends = [[c.attempt_id, _sqlite_time(c.started_at), _sqlite_time(c.ended_at),
                 sql.json_text(c.server), "ok", None, None, None]
                for c in batch if c.message_id in ended and c.attempt_id is not None]
        if ends:
            cur.execute(sql.END_ATTEMPTS, {"rows": json.dumps(ends)})
        done: dict[int, int | None] = {}
        answers = []
        for c in batch:
            row = ended.get(c.message_id)
            if row is None:
                continue
            response_id = responses.get(c.message_id)
            done[c.message_id] = response_id
            if row[4]:
                waited.append(c.message_id)
            if response_id is not None:
                answers.append({"id": response_id, "session_id": row[1], "source": row[2],
                                "target": row[3] or "", "body_class": c.response_class,
                                "body": c.response_body, "now": stamp,
                                "request_id": c.message_id})
        if answers:
            cur.executemany(sql.RESPONSE, answers)
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



def _end_row(end: AttemptEnd) -> list[Any]:
    """A row of END_ATTEMPTS: unfenced, its transition's guard holds."""
    return [end.attempt_id, _sqlite_time(end.started_at), _sqlite_time(end.ended_at),
            sql.json_text(end.server), end.outcome, end.status_code,
            sql.json_text(end.error_text), None]


_STATEMENTS = {type(None): sql.ATTEMPT_ENDED, Requeue: sql.REQUEUE, Hold: sql.REQUEUE,
               RetryAt: sql.RETRY_AT, Finish: sql.FINISH}


def _json_ids(ids: Sequence[int]) -> str:
    return "[" + ",".join(str(int(i)) for i in ids) + "]"
