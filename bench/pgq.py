"""pgqueuer's no-op drain: the peer of Encore's PostgreSQL drain (pgqueuer_drain_ratio).

pgqueuer is a bench-only extra (``pip install -e '.[bench]'``) and is imported only here,
lazily. The database is wiped, pgqueuer's own schema is installed with its installer API
(``Queries.install``), ``count`` jobs are enqueued first, then a ``QueueManager`` with a
no-op entrypoint runs in drain mode (it returns once the queue is empty and every job is
recorded) with pgqueuer's default batch size. Timed from the start of the first job to the
return of the drain, on the event loop ``pgq run`` uses (uvloop when installed).

pgqueuer runs on its asyncpg driver, its fastest (asyncpg is in the bench extra): the peer
at its best. Its psycopg driver waits for NOTIFYs with psycopg's ``notifies()``, which holds
the one connection's lock for up to a second at a time, so its queries queue behind those
waits and it drains about eight times slower here; it is used only when asyncpg is missing,
and the table says which driver ran.
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
    from pgqueuer import PgQueuer
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    conn, driver, name = await _connect(dsn)
    try:
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
                     batch_size=int(batch_size), loop=f"{loop}, {name}",
                     version=getattr(pgqueuer, "__version__", "?"))


async def _connect(dsn: str) -> tuple[Any, Any, str]:
    """A connection and pgqueuer driver: asyncpg when installed, else psycopg's."""
    try:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
    except ImportError:
        import psycopg
        from pgqueuer.db import PsycopgDriver
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        return conn, PsycopgDriver(conn), "psycopg driver"
    conn = await asyncpg.connect(dsn)
    return conn, AsyncpgDriver(conn), "asyncpg driver"


async def _bounded(run: Coroutine[Any, Any, None], count: int) -> None:
    """The drain, given up (TimeoutError) after ``STALL_S`` s plus ``count / MIN_RATE`` s."""
    timeout = h.STALL_S + count / MIN_RATE
    try:
        await asyncio.wait_for(run, timeout)
    except TimeoutError as exc:
        raise TimeoutError(f"pgqueuer did not drain {count} jobs within {timeout:.0f} s") \
            from exc
