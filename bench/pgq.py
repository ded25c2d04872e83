"""pgqueuer's no-op drain: the peer of Encore's PostgreSQL drain (pgqueuer_drain_ratio).

pgqueuer is a bench-only extra (``pip install -e '.[bench]'``) and is imported only here,
lazily. The database is wiped, pgqueuer's own schema is installed with its installer API
(``Queries.install``), ``count`` jobs are enqueued first, then a ``QueueManager`` with a
no-op entrypoint runs in drain mode (it returns once the queue is empty and every job is
recorded) with pgqueuer's default batch size. Timed from the start of the first job to the
return of the drain, on the event loop ``pgq run`` uses (uvloop when installed), through
pgqueuer's psycopg (async) driver, so no extra PostgreSQL driver is needed.

That driver waits for NOTIFYs with psycopg's ``notifies()``, which holds the one connection's
lock for up to a second at a time, so pgqueuer's queries queue behind those waits and its
drain is bound by latency, not CPU. pgqueuer's asyncpg driver (``pip install asyncpg``), which
listens without holding the connection, drains far faster: this figure is pgqueuer *with
psycopg*, not pgqueuer at its best.

Run with pgqueuer 1.6.0; it uses only names that 0.20.0's source also has (checked by
reading it, not run): ``pgqueuer.db.PsycopgDriver``, ``pgqueuer.queries.Queries``,
``pgqueuer.types.QueueExecutionMode``, ``PgQueuer(driver).qm``.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import make_url

from bench import harness as h

ENTRYPOINT = "bench_noop"
PAYLOAD = json.dumps({"n": 1}).encode()  # the body of Encore's no-op messages
ENQUEUE_BATCH = 500  # jobs per enqueue statement while filling the queue
MIN_RATE = 50  # jobs/s: a drain slower than this for its whole length counts as hung


@dataclass(frozen=True)
class PeerDrain:
    """pgqueuer's drain of ``count`` jobs."""

    count: int
    msgs_per_s: float
    seconds: float
    cpu_ms_per_msg: float
    enqueue_msgs_per_s: float
    batch_size: int
    loop: str
    version: str


def unavailable() -> str | None:
    """None when pgqueuer can be used, else why not."""
    try:
        import pgqueuer  # noqa: F401
        from pgqueuer.db import PsycopgDriver  # noqa: F401
        from pgqueuer.types import QueueExecutionMode  # noqa: F401
    except ImportError as exc:
        return f"pgqueuer is not importable ({exc}); pip install -e '.[bench]'"
    return None


def libpq_url(url: str) -> str:
    """``postgresql+psycopg://…`` (SQLAlchemy) or ``postgres://…`` → ``postgresql://…``
    (libpq, psycopg)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def drain(pg_url: str, count: int) -> PeerDrain:
    """Wipe the database, install pgqueuer's schema, enqueue ``count`` jobs, drain them."""
    h.reset_postgres(pg_url)
    loop, run = _runner()
    return run(_drain(libpq_url(pg_url), count, loop))


def _runner() -> tuple[str, Any]:
    """The event loop ``pgq run`` uses: uvloop when it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return "asyncio", asyncio.run
    if hasattr(uvloop, "run"):
        return "uvloop", uvloop.run
    return "asyncio", asyncio.run


async def _drain(dsn: str, count: int, loop: str) -> PeerDrain:
    import pgqueuer
    import psycopg
    from pgqueuer import PgQueuer
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        driver = PsycopgDriver(conn)
        queries = Queries(driver)
        await queries.install()
        t0 = time.perf_counter()
        for start in range(0, count, ENQUEUE_BATCH):
            n = min(ENQUEUE_BATCH, count - start)
            await queries.enqueue([ENTRYPOINT] * n, [PAYLOAD] * n, [0] * n)
        enqueue_s = time.perf_counter() - t0

        app = PgQueuer(driver)
        seen = {"first": 0.0, "jobs": 0}

        @app.entrypoint(ENTRYPOINT)
        async def noop(job: Any) -> None:
            if not seen["jobs"]:
                seen["first"] = time.perf_counter()
            seen["jobs"] += 1

        batch_size = inspect.signature(app.qm.run).parameters["batch_size"].default
        cpu0 = time.process_time()
        await _bounded(app.qm.run(mode=QueueExecutionMode.drain), count)
        end, cpu = time.perf_counter(), time.process_time() - cpu0
    finally:
        await conn.close()
    if seen["jobs"] < count:
        raise RuntimeError(f"pgqueuer ran {seen['jobs']} of {count} jobs")
    seconds = end - seen["first"]
    return PeerDrain(count=count, msgs_per_s=count / max(seconds, 1e-9), seconds=seconds,
                     cpu_ms_per_msg=cpu / count * 1000, enqueue_msgs_per_s=count / enqueue_s,
                     batch_size=int(batch_size), loop=loop,
                     version=getattr(pgqueuer, "__version__", "?"))


async def _bounded(run: Coroutine[Any, Any, None], count: int) -> None:
    """The drain, given up (TimeoutError) after ``STALL_S`` s plus ``count / MIN_RATE`` s."""
    timeout = h.STALL_S + count / MIN_RATE
    try:
        await asyncio.wait_for(run, timeout)
    except asyncio.TimeoutError as exc:
        raise TimeoutError(f"pgqueuer did not drain {count} jobs within {timeout:.0f} s") \
            from exc
