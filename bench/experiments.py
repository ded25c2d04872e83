"""Measurement devices of ``python bench/run.py --profile``: a counting hot path, and the
cost of one committed transaction.

- :func:`install_census` swaps a store's hot path (``SqlStore.db.hot``, the prebuilt statements
  on driver connections of its own, which SQLAlchemy's events do not see) for a subclass
  whose driver connections count what goes through them, and listens to the store's
  SQLAlchemy engine for the rest (failures, retries, leases, the heartbeat): transactions,
  statements by kind, commits that wait for the disk, round trips to PostgreSQL, the rows of
  each claim and the successes of each group commit. Nothing in ``engine/`` knows of it.
- :func:`transaction_costs` times one committed single-row UPDATE on SQLite (``synchronous``
  NORMAL and FULL) and on PostgreSQL (``synchronous_commit`` off and on): the price of the
  durable commits the census counts.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event

from bench import harness as h
from engine.store.hotpath import Claimed, Completion, PostgresHotPath, SqliteHotPath
from engine.store.sql import SqlStore

GROUP = 50  # single-row UPDATEs per transaction in the group-commit row of the costs
_WRITES = ("INSERT", "UPDATE", "DELETE")
# hot-path SQL written inline rather than as a class constant
_INLINE = {"SELECT coalesce(max(id), 0) + 1 FROM message_header": "next id (max(id) + 1)"}


# -- what is counted ----------------------------------------------------------------------------

class Tally:
    """Counts shared by the daemon's threads; nothing is counted until :meth:`start`, nor
    ever in the thread that called it (the bench's: its producer, switch and wait loop may
    use the daemon's store, as the throughput scenarios do, without being counted).

    ``counts`` keys: ``tx`` (transactions), ``durable`` (commits that wrote and waited for
    the disk), ``statements``, ``round_trips`` (PostgreSQL), each prefixed ``hot.`` or
    ``sqla.``; ``claims``, ``claimed``, ``group_commits``, ``successes`` (hot-path steps).
    ``kinds``: statements (and BEGIN, COMMIT) by kind, ``kind_s`` the seconds inside the
    driver's calls by kind, ``driver_s`` their sum."""

    def __init__(self) -> None:
        self.on = False
        self._bench_thread: int | None = None
        self.counts: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self.kind_s: Counter[str] = Counter()
        self.driver_s = 0.0
        self._lock = threading.Lock()

    def start(self) -> None:
        self._bench_thread = threading.get_ident()
        self.on = True

    def counting(self) -> bool:
        """True once started, in a thread of the daemon."""
        return self.on and threading.get_ident() != self._bench_thread

    def add(self, *keys: str, kind: str | None = None, seconds: float = 0.0) -> None:
        """Count one of each of ``keys`` (and one statement of ``kind``)."""
        if not self.counting():
            return
        with self._lock:
            for key in keys:
                self.counts[key] += 1
            if kind is not None:
                self.kinds[kind] += 1
                self.kind_s[kind] += seconds
            self.driver_s += seconds

    def step(self, *, successes: int, claimed: int | None) -> None:
        """One hot-path step: ``successes`` recorded, ``claimed`` rows claimed (None: no
        claim in this step)."""
        if not self.counting():
            return
        with self._lock:
            if successes:
                self.counts["group_commits"] += 1
                self.counts["successes"] += successes
            if claimed is not None:
                self.counts["claims"] += 1
                self.counts["claimed"] += claimed
                self.counts["claims_with_rows"] += bool(claimed)

    def snapshot(self) -> dict[str, Any]:
        """A copy of everything counted so far."""
        with self._lock:
            return {"counts": Counter(self.counts), "kinds": Counter(self.kinds),
                    "kind_s": Counter(self.kind_s), "driver_s": self.driver_s}


def statement_kind(statement: str) -> str:
    """``VERB table`` of an SQL statement, e.g. ``UPDATE message_header``."""
    words = statement.replace("(", " ").split()
    upper = [w.upper() for w in words]
    verb = upper[0] if upper else "?"
    marker = {"UPDATE": "UPDATE", "INSERT": "INTO", "DELETE": "FROM"}.get(verb, "FROM")
    table = words[upper.index(marker) + 1] if marker in upper[:-1] else "?"
    return f"{verb} {table}"


def _statement_names(cls: type) -> dict[str, str]:
    """SQL text → name of the class constant that holds it (``_PICK``, ``_COMPLETE``…)."""
    names = dict(_INLINE)
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, str) and name.lstrip("_").isupper():
                names[value] = name
    return names


# -- the hot path's driver connections, counted ----------------------------------------------------

class _SqliteCursor:
    """A sqlite3 cursor that counts: ``BEGIN IMMEDIATE`` opens a transaction, ``COMMIT``
    ends it (durable when the connection runs ``synchronous = FULL`` and rows changed)."""

    def __init__(self, cursor: sqlite3.Cursor, conn: _SqliteConnection) -> None:
        self._cur = cursor
        self._conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self._conn.timed(sql, lambda: self._cur.execute(sql, params))

    def executemany(self, sql: str, seq: Any) -> Any:
        return self._conn.timed(sql, lambda: self._cur.executemany(sql, seq))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


class _SqliteConnection:
    """A sqlite3 connection of the hot path whose cursors count (see :class:`_SqliteCursor`)."""

    def __init__(self, conn: sqlite3.Connection, durable: bool, tally: Tally,
                 names: dict[str, str]) -> None:
        self._conn, self._durable, self._tally, self._names = conn, durable, tally, names
        self._changes_at_begin = 0

    def cursor(self) -> _SqliteCursor:
        return _SqliteCursor(self._conn.cursor(), self)

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.timed(sql, lambda: self._conn.execute(sql, params))

    def timed(self, sql: str, call: Any) -> Any:
        """Run ``call`` (the driver's execute of ``sql``) and count it."""
        t0 = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - t0
        verb = sql.lstrip().split(None, 1)[0].upper()
        if verb == "BEGIN":
            self._changes_at_begin = self._conn.total_changes
            self._tally.add("hot.tx", seconds=seconds, kind="BEGIN IMMEDIATE")
        elif verb == "COMMIT":
            wrote = self._conn.total_changes > self._changes_at_begin
            keys = ("hot.durable",) if self._durable and wrote else ()
            self._tally.add(*keys, seconds=seconds, kind="COMMIT, synchronous = "
                            f"{'FULL' if self._durable else 'NORMAL'}")
        elif verb != "ROLLBACK":
            self._tally.add("hot.statements", seconds=seconds,
                            kind=self._names.get(sql) or statement_kind(sql))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _PgConnection:
    """A psycopg connection of the hot path (autocommit) that counts: every ``execute`` is a
    statement, a transaction and a round trip; durable when the connection runs
    ``synchronous_commit = on`` and the statement returned rows (it wrote)."""

    def __init__(self, conn: Any, durable: bool, tally: Tally, names: dict[str, str]) -> None:
        self._conn, self._durable, self._tally, self._names = conn, durable, tally, names

    def execute(self, sql: str, params: Any = None, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        cursor = self._conn.execute(sql, params, **kwargs)
        seconds = time.perf_counter() - t0
        keys = ["hot.tx", "hot.statements", "hot.round_trips"]
        if self._durable and (cursor.rowcount or 0) > 0:
            keys.append("hot.durable")
        self._tally.add(*keys, seconds=seconds,
                        kind=self._names.get(sql) or statement_kind(sql))
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _Counting:
    """Mixed into a hot path: its new driver connections count, and so do its steps (a
    claim's rows, a group commit's successes), once per step however the dialect nests
    them."""

    tally: Tally
    _wrapper: type
    _names: dict[str, str]
    _depth: threading.local

    def _new_connection(self, durable: bool) -> Any:
        conn = super()._new_connection(durable)  # type: ignore[misc]
        return self._wrapper(conn, durable, self.tally, self._names)

    @contextmanager
    def _outer(self) -> Iterator[bool]:
        """True for the outermost step call of this thread."""
        depth = getattr(self._depth, "n", 0)
        self._depth.n = depth + 1
        try:
            yield depth == 0
        finally:
            self._depth.n = depth

    def complete_and_claim(self, completions: Sequence[Completion], *, now: Any,
                           **claim: Any) -> tuple[list[int], list[Claimed]]:
        with self._outer() as outer:
            done, claimed = super().complete_and_claim(  # type: ignore[misc]
                completions, now=now, **claim)
        if outer:
            self.tally.step(successes=len(completions), claimed=len(claimed))
        return done, claimed

    def claim(self, target: str, **kwargs: Any) -> list[Claimed]:
        with self._outer() as outer:
            claimed = super().claim(target, **kwargs)  # type: ignore[misc]
        if outer:
            self.tally.step(successes=0, claimed=len(claimed))
        return claimed

    def complete_many(self, completions: Sequence[Completion], *, now: Any) -> list[int]:
        with self._outer() as outer:
            done = super().complete_many(completions, now=now)  # type: ignore[misc]
        if outer:
            self.tally.step(successes=len(completions), claimed=None)
        return done


class CountingSqliteHotPath(_Counting, SqliteHotPath):
    """:class:`SqliteHotPath` on counting connections."""

    _wrapper = _SqliteConnection
    _names = _statement_names(SqliteHotPath)


class CountingPostgresHotPath(_Counting, PostgresHotPath):
    """:class:`PostgresHotPath` on counting connections."""

    _wrapper = _PgConnection
    _names = _statement_names(PostgresHotPath)


# -- SQLAlchemy's side ---------------------------------------------------------------------------

def _listen(store: SqlStore, tally: Tally) -> None:
    """Count the statements, transactions and durable commits the store runs through
    SQLAlchemy (SQLite's BEGIN IMMEDIATE is no statement here). On PostgreSQL a transaction
    that ran statements costs a BEGIN and a COMMIT/ROLLBACK round trip besides them (psycopg
    sends them separately)."""
    engine, pg = store.engine, store.is_postgres

    @event.listens_for(engine, "begin")
    def begin(conn: Any) -> None:
        conn.info["census"] = {"wrote": False, "sync_off": False, "ran": False}
        tally.add("sqla.tx")

    @event.listens_for(engine, "before_cursor_execute")
    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info["census_t0"] = time.perf_counter()

    @event.listens_for(engine, "after_cursor_execute")
    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seconds = time.perf_counter() - conn.info.pop("census_t0", time.perf_counter())
        state = conn.info.setdefault("census", {"wrote": False, "sync_off": False,
                                                "ran": False})
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb == "BEGIN":  # SQLite's BEGIN IMMEDIATE, from the engine's begin hook
            tally.add(seconds=seconds, kind="SQLAlchemy: BEGIN")
            return
        keys = ["sqla.statements"] + (["sqla.round_trips"] if pg else [])
        if pg and not state["ran"]:
            keys.append("sqla.round_trips")  # psycopg's BEGIN
        state["ran"] = True
        if "synchronous_commit TO OFF" in statement:
            state["sync_off"] = True
        elif verb in _WRITES and (cursor.rowcount or 0) > 0:
            state["wrote"] = True
        tally.add(*keys, seconds=seconds, kind=f"SQLAlchemy: {statement_kind(statement)}")

    def end(committed: bool) -> Any:
        def ended(conn: Any) -> None:
            state = conn.info.pop("census", None) or {}
            keys = ["sqla.round_trips"] if pg and state.get("ran") else []
            # SQLite: the engine's connect hook sets synchronous = NORMAL, no fsync per commit
            if committed and state.get("wrote") and pg and not state.get("sync_off"):
                keys.append("sqla.durable")
            tally.add(*keys)
        return ended

    event.listen(engine, "commit", end(True))
    event.listen(engine, "rollback", end(False))


def install_census(store: SqlStore) -> Tally:
    """Count the database work of ``store`` from now on (see the module docstring); the
    returned tally counts once started. Bench-only: it replaces the store's hot path."""
    tally = Tally()
    old = store.db.hot
    cls = CountingPostgresHotPath if store.is_postgres else CountingSqliteHotPath
    hot = cls(store.engine, old._is_driver_error)
    hot.tally, hot._depth = tally, threading.local()
    old.dispose()
    store.db.hot = hot
    _listen(store, tally)
    return tally


# -- the cost of one transaction -------------------------------------------------------------------

def _timed_per_call(calls: int, fn: Any) -> float:
    """Milliseconds per call of ``fn(i)`` for i in range(calls)."""
    t0 = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - t0) / calls * 1000


def _sqlite_costs(path: Path, ids: list[int]) -> list[tuple[str, float]]:
    """One committed UPDATE on a sqlite3 connection as the hot path opens them (WAL)."""
    raw = sqlite3.connect(str(path), isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    sql = "UPDATE message_header SET status = ? WHERE id = ?"

    def one(i: int) -> None:
        raw.execute("BEGIN IMMEDIATE")
        raw.execute(sql, ("Delivered" if i % 2 else "Queued", ids[i % len(ids)]))
        raw.execute("COMMIT")

    def group(i: int) -> None:
        raw.execute("BEGIN IMMEDIATE")
        for j in range(GROUP):
            raw.execute(sql, ("Delivered" if i % 2 else "Queued", ids[(i + j) % len(ids)]))
        raw.execute("COMMIT")

    out = []
    for sync in ("NORMAL", "FULL"):
        raw.execute(f"PRAGMA synchronous={sync}")
        out.append((f"SQLite, synchronous = {sync}, one UPDATE per transaction",
                    _timed_per_call(len(ids), one)))
    out.append((f"SQLite, synchronous = FULL, {GROUP} UPDATEs per transaction (per UPDATE)",
                _timed_per_call(max(len(ids) // GROUP, 1), group) / GROUP))
    raw.close()
    return out


def _pg_costs(store: SqlStore, ids: list[int]) -> list[tuple[str, float]]:
    """One UPDATE on an autocommit psycopg connection (one round trip, one transaction)."""
    raw = store.engine.raw_connection()
    conn = raw.driver_connection
    raw.detach()
    conn.rollback()
    conn.autocommit = True
    sql = "UPDATE message_header SET status = %s WHERE id = %s"

    def one(i: int) -> None:
        conn.execute(sql, ("Delivered" if i % 2 else "Queued", ids[i % len(ids)]), prepare=True)

    def group(i: int) -> None:
        with conn.transaction():
            for j in range(GROUP):
                conn.execute(sql, ("Delivered" if i % 2 else "Queued",
                                   ids[(i + j) % len(ids)]), prepare=True)

    out = []
    for sync in ("off", "on"):
        conn.execute(f"SET synchronous_commit TO {sync}")
        out.append((f"PostgreSQL, synchronous_commit = {sync}, one UPDATE per transaction "
                    "(autocommit)", _timed_per_call(len(ids), one)))
    out.append((f"PostgreSQL, synchronous_commit = on, {GROUP} UPDATEs per transaction "
                "(per UPDATE)", _timed_per_call(max(len(ids) // GROUP, 1), group) / GROUP))
    conn.close()
    return out


def _rows(store: SqlStore, count: int) -> list[int]:
    return store.enqueue_many(target="T", bodies=[(None, "{}")] * count)


def transaction_costs(work: Path, pg_url: str | None, count: int) -> list[tuple[str, float]]:
    """(way, ms) of one single-row UPDATE committed on its own, SQLite and PostgreSQL, each
    with and without waiting for the disk; and the same UPDATE ``GROUP`` to a commit."""
    url = h.sqlite_url(work, "tx-cost.db")
    store = h.fresh_store(url)
    try:
        out = _sqlite_costs(work / "tx-cost.db", _rows(store, count))
    finally:
        store.dispose()
    if pg_url:
        store = h.fresh_store(pg_url)
        try:
            out += _pg_costs(store, _rows(store, count))
        finally:
            store.dispose()
    return out


def format_costs(rows: list[tuple[str, float]], load: str) -> str:
    lines = [f"### One committed single-row UPDATE (load average {load})", "",
             "| way | ms |", "|---|---|"]
    lines += [f"| {name} | {ms:.3f} |" for name, ms in rows]
    return "\n".join(lines)
