"""The dramatiq peer of issue 27: ``count`` no-op messages enqueued first on RabbitMQ, then
drained by one dramatiq worker process with 4 threads (``python -m dramatiq
bench.dramatiq_app --processes 1 --threads 4``).

RabbitMQ is the one already running on the machine (``127.0.0.1:5672``, guest/guest, or
``$ENCORE_BENCH_DRAMATIQ_URL``); the bench does not start it (``rabbitmq-server -detached``
does). Each run uses a queue of its own, ``encore-bench-<pid>``, purged before the enqueue
and deleted (with dramatiq's delay and dead-letter queues) at the end. The drain is timed
from the first message's start to the last one's end, as written by the actor itself
(bench/dramatiq_app.py), so the worker's start-up is left out, as a daemon's is for Encore.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import harness as h
from bench.intake_http import stop

THREADS = 4
START_TIMEOUT = 60.0  # seconds the worker may take to process its first message
STALL_S = 30.0  # seconds without a processed message after which the wait gives up
POLL = 0.05  # seconds between two looks at the times file


@dataclass(frozen=True)
class DramatiqDrain:
    count: int
    msgs_per_s: float
    seconds: float
    enqueue_msgs_per_s: float
    version: str


def _url() -> str:
    from bench.dramatiq_app import DEFAULT_URL, URL_ENV  # optional peer

    return os.environ.get(URL_ENV, DEFAULT_URL)


def unavailable() -> str | None:
    """Why the dramatiq peer cannot run here, or None."""
    if importlib.util.find_spec("dramatiq") is None or importlib.util.find_spec("pika") is None:
        return "dramatiq[rabbitmq] is not installed (pip install -e '.[bench]')"
    import pika

    params = pika.URLParameters(_url())
    try:
        pika.BlockingConnection(params).close()
    except Exception as exc:  # any failure to connect means no broker
        return (f"RabbitMQ is not reachable at {params.host}:{params.port} "
                f"({type(exc).__name__}: {exc}); start it with `rabbitmq-server -detached`")
    return None


def _delete_queues(queue: str) -> None:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(_url()))
    try:
        channel = conn.channel()
        for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
            channel.queue_delete(name)
    finally:
        conn.close()


def drain(work: Path, count: int, threads: int = THREADS) -> DramatiqDrain:
    """Enqueue ``count`` no-op messages, then drain them with one worker of ``threads``
    threads; messages/s from the first start to the last end."""
    import dramatiq

    from bench import dramatiq_app as app  # optional peer

    queue = f"encore-bench-{os.getpid()}-{time.monotonic_ns()}"
    times = work / f"dramatiq-{queue}.times"
    times.write_bytes(b"")
    # the actor of this process must send to this run's queue, as the worker's consumes it
    app.noop.queue_name = queue
    app.broker.declare_queue(queue, ensure=True)
    try:
        app.broker.flush(queue)  # purge before
        t0 = time.perf_counter()
        for _ in range(count):
            app.noop.send()
        enqueue_s = time.perf_counter() - t0
        log = (work / f"{queue}.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "dramatiq", "bench.dramatiq_app", "--processes", "1",
             "--threads", str(threads)], cwd=h.ROOT,
            env=h.cli_env({app.QUEUE_ENV: queue, app.TIMES_ENV: str(times),
                           app.URL_ENV: _url()}), stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait(times, count, proc, log.name)
        finally:
            stop(proc)
            log.close()
    finally:
        try:
            app.broker.flush(queue)  # purge after
        finally:
            _delete_queues(queue)
    starts, ends = [], []
    for line in times.read_text().splitlines():
        start, end = line.split()
        starts.append(float(start))
        ends.append(float(end))
    seconds = max(ends) - min(starts)
    return DramatiqDrain(count=count, msgs_per_s=count / max(seconds, 1e-9), seconds=seconds,
                         enqueue_msgs_per_s=count / enqueue_s, version=dramatiq.__version__)


def _wait(times: Path, count: int, proc: subprocess.Popen[bytes], log: str) -> None:
    from bench.dramatiq_app import LINE

    started = time.monotonic()
    last, last_change = -1, started
    while (done := times.stat().st_size // LINE) < count:
        now = time.monotonic()
        if proc.poll() is not None:
            raise RuntimeError(f"the dramatiq worker exited ({proc.returncode}) after {done} "
                               f"of {count} messages: see {log}")
        if done != last:
            last, last_change = done, now
        limit = START_TIMEOUT if done == 0 else STALL_S
        if now - last_change > limit:
            raise TimeoutError(f"dramatiq: only {done} of {count} messages processed "
                               f"(stalled); see {log}")
        time.sleep(POLL)
