"""celery_roundtrip_ms_p50 (issue 21): the peer a Python team would pick for "call and wait":
Celery with a Redis broker and result backend, ``noop.delay().get()`` of a no-op task.

The bench starts its own ``redis-server`` on a free loopback port (no persistence) and one
Celery worker (``--pool solo``, concurrency 1) as subprocesses, both stopped at the end; then
``count`` sequential ``delay().get()`` calls from this process (after a few untimed ones).
``sync_vs_celery`` (Celery's p50 ÷ Encore's ``sync_roundtrip_ms_p50``) is computed by
bench/run.py once both scenarios have run.
"""
from __future__ import annotations

import importlib.util
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import harness as h
from bench.intake_http import _free_port, stop
from bench.latency import WARM_CALLS, _spread
from bench.report import Outcome

START_TIMEOUT = 30.0  # seconds redis-server and the worker may take to be ready
CALL_TIMEOUT = 10.0  # seconds one delay().get() may take


def unavailable() -> str | None:
    """Why the Celery peer cannot run here, or None."""
    if importlib.util.find_spec("celery") is None or importlib.util.find_spec("redis") is None:
        return "celery[redis] is not installed (pip install -e '.[bench]')"
    if shutil.which("redis-server") is None:
        return "redis-server is not on PATH (apt-get install redis-server)"
    return None


@contextmanager
def redis_server(work: Path) -> Iterator[str]:
    """A private ``redis-server`` on a free loopback port; its URL."""
    import redis

    port = _free_port()
    log = (work / "redis.log").open("w")
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--daemonize", "no",
                             "--dir", str(work)], stdout=log, stderr=subprocess.STDOUT)
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start: see {log.name}") from None
                time.sleep(0.05)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


@contextmanager
def celery_worker(work: Path, url: str) -> Iterator[subprocess.Popen[bytes]]:
    from bench.celery_app import URL_ENV

    log = (work / "celery-worker.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker",
                             "--pool", "solo", "--concurrency", "1", "--without-gossip",
                             "--without-mingle", "--without-heartbeat", "--loglevel",
                             "WARNING"], cwd=h.ROOT, env=h.cli_env({URL_ENV: url}),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        stop(proc)
        log.close()


def roundtrips(url: str, count: int) -> list[float]:
    from bench.celery_app import NOOP, make_app

    app = make_app(url)
    noop = app.tasks[NOOP]
    noop.delay().get(timeout=START_TIMEOUT)  # waits in the queue until the worker is up
    durations = []
    for i in range(WARM_CALLS + count):
        t0 = time.perf_counter()
        noop.delay().get(timeout=CALL_TIMEOUT)
        if i >= WARM_CALLS:
            durations.append((time.perf_counter() - t0) * 1000)
    app.close()
    return durations


def celery(work: Path, count: int) -> Outcome:
    out = Outcome()
    why_not = unavailable()
    durations = None
    if why_not is None:
        try:
            with redis_server(work) as url, celery_worker(work, url):
                durations = roundtrips(url, count)
        except Exception as exc:  # an optional peer: its key goes null
            why_not = f"the Celery peer failed: {type(exc).__name__}: {exc}"
    if durations is None:
        print(f"[bench] celery_roundtrip_ms_p50 and sync_vs_celery are null: {why_not}",
              file=sys.stderr, flush=True)
        out.key("celery_roundtrip_ms_p50", "Celery not available", None, note=why_not or "")
        return out
    out.key("celery_roundtrip_ms_p50", "Celery + Redis: noop.delay().get(), sequential",
            statistics.median(durations), "ms",
            f"{_spread(durations)}; worker --pool solo, private redis-server")
    return out
