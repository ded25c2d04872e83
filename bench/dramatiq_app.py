"""The dramatiq peer's app (issue 27, bench/dramatiq_peer.py): one no-op actor on RabbitMQ.

``python -m dramatiq bench.dramatiq_app --processes 1 --threads 4`` runs it. The queue is
``$ENCORE_BENCH_DRAMATIQ_QUEUE`` (each bench run has its own, so that two runs on one broker
never take each other's messages); every message processed appends one fixed-width line,
``start end`` (``time.time()`` when the actor began and ended), to the file
``$ENCORE_BENCH_DRAMATIQ_TIMES`` with a single ``os.write`` on an ``O_APPEND`` descriptor, so
the bench counts what was processed from the file's size alone and reads the window from
the first start to the last end.
"""
from __future__ import annotations

import os
import threading
import time

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

URL_ENV = "ENCORE_BENCH_DRAMATIQ_URL"
QUEUE_ENV = "ENCORE_BENCH_DRAMATIQ_QUEUE"
TIMES_ENV = "ENCORE_BENCH_DRAMATIQ_TIMES"
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
DEFAULT_QUEUE = "encore-bench-noop"
LINE = 40  # bytes per line of the times file: f"{start:19.6f} {end:19.6f}\n"

broker = RabbitmqBroker(url=os.environ.get(URL_ENV, DEFAULT_URL))
dramatiq.set_broker(broker)

_fd: int | None = None
_fd_lock = threading.Lock()


def _times() -> int:
    global _fd
    if _fd is None:
        with _fd_lock:
            if _fd is None:
                _fd = os.open(os.environ[TIMES_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                              0o644)
    return _fd


@dramatiq.actor(queue_name=os.environ.get(QUEUE_ENV, DEFAULT_QUEUE), max_retries=0)
def noop() -> None:
    """Does nothing; records when it ran."""
    start = time.time()
    end = time.time()
    os.write(_times(), f"{start:19.6f} {end:19.6f}\n".encode())
