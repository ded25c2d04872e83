"""What-if stores: the no-op figure with some of the profile's suggestions applied, to put
numbers on them before anyone changes the engine. ``python bench/run.py --profile``.

These subclasses are measurement devices, not proposals to copy: ``MergedStore`` writes an
attempt's row only when it ends, which would lose the in-flight record on a crash. The real
change (claim and begin in one transaction, end and complete in another) issues the same
number of transactions per message as ``MergedStore`` does.
"""
from __future__ import annotations

import statistics
import threading
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, create_engine, func, insert, or_, select, update

from bench import harness as h
from engine.store.database import normalise_url
from engine.store.models import message_attempt, message_header
from engine.store.sql import MessageRow, SqlStore

OVERRIDES_TTL = 1.0  # seconds an item_overrides() answer is reused


class ClaimStore(SqlStore):
    """The claim as one index-friendly branch: ``status = 'Queued'`` and due, in id order,
    which the (target, status, id) index answers without reading finished messages. Only
    when that finds nothing does it fall back to the engine's claim (expired leases)."""

    def claim_next(self, target: str, *, owner: str, now: Any, lease_seconds: float,
                   **kwargs: Any) -> Any:
        if kwargs.get("fifo"):
            return super().claim_next(target, owner=owner, now=now,
                                      lease_seconds=lease_seconds, **kwargs)
        hc = message_header.c
        pick = (select(hc.id).where(hc.target == target, hc.status == "Queued",
                                    or_(hc.next_attempt_at.is_(None), hc.next_attempt_at <= now))
                .order_by(hc.id).limit(1))
        if self.engine.dialect.name == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        stmt = (update(message_header).where(hc.id == pick.scalar_subquery())
                .values(status="Delivered", claimed_by=owner,
                        lease_expires_at=now + timedelta(seconds=lease_seconds),
                        time_processed=func.coalesce(hc.time_processed, now))
                .returning(*message_header.c))
        with self.engine.begin() as conn:
            row = conn.execute(stmt).mappings().first()
        if row is not None:
            return MessageRow.from_mapping(row)
        return super().claim_next(target, owner=owner, now=now, lease_seconds=lease_seconds,
                                  **kwargs)


class CachedStore(ClaimStore):
    """ClaimStore, and no per-message reads: ``item_overrides`` cached for a second; ``open_attempt`` not
    asked for a message claimed with no attempt yet (it cannot have an open one)."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self._fresh: set[int] = set()
        self._overrides: tuple[float, dict[str, bool]] = (-1e9, {})
        self._lock = threading.Lock()

    def claim_next(self, *args: Any, **kwargs: Any) -> Any:
        row = super().claim_next(*args, **kwargs)
        if row is not None and row.attempts == 0:
            with self._lock:
                self._fresh.add(row.id)
        return row

    def open_attempt(self, message_id: int) -> Any:
        with self._lock:
            if message_id in self._fresh:
                self._fresh.discard(message_id)
                return None
        return super().open_attempt(message_id)

    def item_overrides(self) -> dict[str, bool]:
        at, value = self._overrides
        if time.monotonic() - at > OVERRIDES_TTL:
            value = super().item_overrides()
            self._overrides = (time.monotonic(), value)
        return value


class MergedStore(CachedStore):
    """CachedStore, and an attempt's begin, end and the completion in one transaction
    (no SELECT of the request either: the claimed row already holds what it needs).
    Any other outcome writes the attempt first, then goes the usual way."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self._rows: dict[int, Any] = {}
        self._pending: dict[int, dict[str, Any]] = {}  # message id → attempt values
        self._next_fake = -1

    def claim_next(self, *args: Any, **kwargs: Any) -> Any:
        row = super().claim_next(*args, **kwargs)
        if row is not None:
            self._rows[row.id] = row
        return row

    def begin_attempt(self, message_id: int, attempt: int, *, started_at: Any) -> int:
        with self._lock:
            fake, self._next_fake = self._next_fake, self._next_fake - 1
            self._pending[fake] = {"message_id": message_id, "attempt": attempt,
                                   "started_at": started_at}
        return fake

    def end_attempt(self, attempt_id: int, **values: Any) -> None:
        if attempt_id >= 0:
            return super().end_attempt(attempt_id, **values)
        self._pending[attempt_id].update(values)

    def _take(self, message_id: int) -> dict[str, Any] | None:
        with self._lock:
            for key, values in list(self._pending.items()):
                if values["message_id"] == message_id:
                    return self._pending.pop(key)
        return None

    def _flush(self, message_id: int) -> None:
        attempt = self._take(message_id)
        if attempt is not None:
            with self.engine.begin() as conn:
                _write_attempt(conn, attempt)

    def complete(self, message_id: int, *, response_class: str | None,
                 response_body: str | None, now: Any) -> int | None:
        attempt, row = self._take(message_id), self._rows.pop(message_id, None)
        if attempt is None or row is None:
            return super().complete(message_id, response_class=response_class,
                                    response_body=response_body, now=now)
        hc = message_header.c
        with self.engine.begin() as conn:
            _write_attempt(conn, attempt)
            response_id = None
            if response_body is not None:
                response_id = conn.execute(insert(message_header).values(
                    session_id=row.session_id, source=row.target, target=row.source or "",
                    kind="response", body_class=response_class, body=response_body,
                    status="Completed", is_error=False, time_created=now, time_processed=now,
                    time_completed=now, corresponding_id=message_id, retry_needed=False,
                    attempts=0).returning(hc.id)).scalar_one()
            conn.execute(update(message_header).where(hc.id == message_id).values(
                status="Completed", is_error=False, retry_needed=False, next_attempt_at=None,
                time_completed=now, corresponding_id=response_id, claimed_by=None,
                lease_expires_at=None))
        return response_id

    def schedule_retry(self, message_id: int, **kwargs: Any) -> None:
        self._flush(message_id)
        super().schedule_retry(message_id, **kwargs)

    def finish(self, message_id: int, **kwargs: Any) -> None:
        self._flush(message_id)
        super().finish(message_id, **kwargs)

    def release(self, message_id: int) -> None:
        self._flush(message_id)
        super().release(message_id)


class BatchStore(MergedStore):
    """MergedStore, and batches: ``BATCH`` messages claimed in one statement, and the
    successes of a batch (attempt rows and completions) written in one transaction when the
    batch is used up — group commit. A completion is durable up to one batch later."""

    BATCH = 50  # messages per claim and per group commit

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self._ready: list[Any] = []
        self._done: list[tuple[dict[str, Any], Any, str | None, str | None, Any]] = []

    def claim_next(self, target: str, *, owner: str, now: Any, lease_seconds: float,
                   **kwargs: Any) -> Any:
        # A FIFO item (pool 1, blocking) is claimed in batches too: its one worker takes
        # the batch in id order, and the no-op never parks a message, so order holds.
        if not self._ready:
            self._flush_done()
            self._ready = self._claim_batch(target, owner, now, lease_seconds)
        if not self._ready:
            return super().claim_next(target, owner=owner, now=now,
                                      lease_seconds=lease_seconds, **kwargs)
        row = self._ready.pop(0)
        with self._lock:
            self._rows[row.id] = row
            if row.attempts == 0:
                self._fresh.add(row.id)
        return row

    def _claim_batch(self, target: str, owner: str, now: Any, lease_seconds: float) -> list[Any]:
        hc = message_header.c
        pick = (select(hc.id).where(hc.target == target, hc.status == "Queued",
                                    or_(hc.next_attempt_at.is_(None), hc.next_attempt_at <= now))
                .order_by(hc.id).limit(self.BATCH))
        if self.engine.dialect.name == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        stmt = (update(message_header).where(hc.id.in_(pick.scalar_subquery()))
                .values(status="Delivered", claimed_by=owner,
                        lease_expires_at=now + timedelta(seconds=lease_seconds),
                        time_processed=func.coalesce(hc.time_processed, now))
                .returning(*message_header.c))
        with self.engine.begin() as conn:
            rows = [MessageRow.from_mapping(r) for r in conn.execute(stmt).mappings()]
        return sorted(rows, key=lambda r: r.id)

    def complete(self, message_id: int, *, response_class: str | None,
                 response_body: str | None, now: Any) -> int | None:
        attempt, row = self._take(message_id), self._rows.pop(message_id, None)
        if attempt is None or row is None:
            return super().complete(message_id, response_class=response_class,
                                    response_body=response_body, now=now)
        self._done.append((attempt, row, response_class, response_body, now))
        return None  # the response id is known only at the group commit

    def _flush_done(self) -> None:
        if not self._done:
            return
        done, self._done = self._done, []
        with self.engine.begin() as conn:
            for attempt, row, response_class, response_body, now in done:
                _write_attempt(conn, attempt)
                response_id = None
                if response_body is not None:
                    response_id = conn.execute(insert(message_header).values(
                        session_id=row.session_id, source=row.target, target=row.source or "",
                        kind="response", body_class=response_class, body=response_body,
                        status="Completed", is_error=False, time_created=now,
                        time_processed=now, time_completed=now, corresponding_id=row.id,
                        retry_needed=False, attempts=0).returning(message_header.c.id)
                    ).scalar_one()
                conn.execute(update(message_header).where(message_header.c.id == row.id).values(
                    status="Completed", is_error=False, retry_needed=False,
                    next_attempt_at=None, time_completed=now, corresponding_id=response_id,
                    claimed_by=None, lease_expires_at=None))


def _write_attempt(conn: Any, a: dict[str, Any]) -> None:
    hc = message_header.c
    conn.execute(update(message_header).where(hc.id == a["message_id"]).values(
        attempts=a["attempt"], next_attempt_at=None,
        first_attempt_at=func.coalesce(hc.first_attempt_at, a["started_at"])))
    conn.execute(insert(message_attempt).values(
        message_id=a["message_id"], attempt=a["attempt"], started_at=a["started_at"],
        ended_at=a.get("ended_at"), outcome=a.get("outcome"), server=a.get("server"),
        status_code=a.get("status_code"), error_text=a.get("error_text")))


# -- running them -------------------------------------------------------------------------------

def noop_with(store: SqlStore, url: str, count: int) -> float:
    """No-op msgs/s (pool 1) through an in-process daemon on ``store`` (a fresh database)."""
    try:
        prod = h.load(h.production_text(database=url, item="Noop",
                                        cls="bench.ops:NoopOperation"))
        return h.daemon_throughput(store, prod, "Noop", {"n": 1}, count)["msgs_per_s"]
    finally:
        store.dispose()


def _prepared(store: SqlStore) -> SqlStore:
    store.upgrade()
    return store


STORE_VARIANTS = (("as is", SqlStore),
                  ("index-friendly claim", ClaimStore),
                  ("+ no per-message reads", CachedStore),
                  ("+ end and complete in one transaction", MergedStore),
                  (f"+ claims and successes in batches of {BatchStore.BATCH}", BatchStore))
REPEATS = 3  # runs of each variant, interleaved; the median is reported


def _one(db: str, work: Any, pg_url: str | None, name: str, count: int) -> float:
    if db == "SQLite":
        url = h.sqlite_url(work, f"what-if-{time.monotonic_ns()}.db")
    else:
        url = normalise_url(pg_url or "")
        h.reset_postgres(url)
    stores = dict(STORE_VARIANTS)
    if name in stores:
        return noop_with(_prepared(stores[name](url)), url, count)
    kwargs: dict[str, Any] = {}
    if "synchronous_commit" in name:
        kwargs["connect_args"] = {"options": "-c synchronous_commit=off"}
    engine = create_engine(url, pool_pre_ping=False, pool_size=10, max_overflow=20, **kwargs)
    return noop_with(_prepared(SqlStore(url, engine=engine)), url, count)


def applicable() -> bool:
    """The what-if stores override the store API of commit 6d63043 (``claim_next``, then
    ``begin_attempt``/``end_attempt``/``complete(message_id)``); an engine that claims with
    ``claim_and_begin`` has already taken those steps, and the stores would not apply."""
    return not hasattr(SqlStore, "claim_and_begin")


def variants(work: Any, pg_url: str | None, count: int) -> list[tuple[str, str, float]]:
    """(database, variant, median no-op msgs/s of ``REPEATS`` interleaved runs); empty when
    the engine's store API is not the one the variants were written for."""
    if not applicable():
        return []
    plan = [("SQLite", name) for name, _ in STORE_VARIANTS]
    if pg_url is not None:
        plan += [("PostgreSQL", name) for name, _ in STORE_VARIANTS]
        plan += [("PostgreSQL", "as is, without pool_pre_ping"),
                 ("PostgreSQL", ("without pool_pre_ping, synchronous_commit = off "
                                 "(trades durability: to size the fsync cost only)"))]
    runs: dict[tuple[str, str], list[float]] = {key: [] for key in plan}
    for _ in range(REPEATS):
        for db, name in plan:
            runs[(db, name)].append(_one(db, work, pg_url, name, count))
    return [(db, name, statistics.median(runs[(db, name)])) for db, name in plan]


def format_variants(rows: list[tuple[str, str, float]]) -> str:
    if not rows:
        return ("### What-if\n\nSkipped: this engine already claims and begins in one "
                "transaction (`claim_and_begin`), so the what-if stores, written against the "
                "store of commit 6d63043, do not apply. See BENCHMARKS.md for their figures.")
    lines = [(f"### What-if: no-op msgs/s (pool 1, SQLite file / PostgreSQL), suggestions "
              f"applied cumulatively in a bench-only store (median of {REPEATS} interleaved "
              "runs)"),
             "", "| database | variant | msg/s |", "|---|---|---|"]
    lines += [f"| {db} | {name} | {value:.0f} |" for db, name, value in rows]
    return "\n".join(lines)


# -- the cost of one transaction ---------------------------------------------------------------

def transaction_costs(work: Any, count: int = 2000) -> list[tuple[str, float]]:
    """(way, ms) of one single-row UPDATE committed on its own, on SQLite, five ways."""
    import sqlite3

    url = h.sqlite_url(work, "tx-cost.db")
    store = h.fresh_store(url)
    ids = [store.enqueue(target="T", body_class=None, body="{}") for _ in range(count)]
    hc = message_header.c
    prebuilt = update(message_header).where(hc.id == bindparam("mid")).values(
        status=bindparam("st"))
    raw = sqlite3.connect(str(work / "tx-cost.db"), isolation_level=None)
    raw.execute("PRAGMA synchronous=NORMAL")

    def core_built_per_call(i: int, st: str) -> None:
        with store.engine.begin() as conn:
            conn.execute(update(message_header).where(hc.id == i).values(status=st))

    def core_prebuilt(i: int, st: str) -> None:
        with store.engine.begin() as conn:
            conn.execute(prebuilt, {"mid": i, "st": st})

    def driver_sql(i: int, st: str) -> None:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE message_header SET status = ? WHERE id = ?", (st, i))

    def plain_sqlite3(i: int, st: str) -> None:
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("UPDATE message_header SET status = ? WHERE id = ?", (st, i))
        raw.execute("COMMIT")

    out = []
    for name, fn in (("SQLAlchemy Core, statement built per call (as SqlStore does)",
                      core_built_per_call),
                     ("SQLAlchemy Core, statement built once (bindparam)", core_prebuilt),
                     ("SQLAlchemy exec_driver_sql", driver_sql),
                     ("sqlite3 directly", plain_sqlite3)):
        t0 = time.perf_counter()
        for n, i in enumerate(ids):
            fn(i, "Delivered" if n % 2 else "Queued")
        out.append((name, (time.perf_counter() - t0) / count * 1000))
    t0 = time.perf_counter()
    raw.execute("BEGIN IMMEDIATE")
    for i in ids:
        raw.execute("UPDATE message_header SET status = 'Queued' WHERE id = ?", (i,))
    raw.execute("COMMIT")
    out.append((f"sqlite3, {count} updates in one transaction (per update)",
                (time.perf_counter() - t0) / count * 1000))
    raw.close()
    store.dispose()
    return out


def format_costs(rows: list[tuple[str, float]]) -> str:
    lines = ["### One single-row UPDATE, committed on its own (SQLite, WAL, synchronous=NORMAL)",
             "", "| way | ms |", "|---|---|"]
    lines += [f"| {name} | {ms:.3f} |" for name, ms in rows]
    return "\n".join(lines)
