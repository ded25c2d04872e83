"""The Celery peer of bench/celery_peer.py: one no-op task, a Redis broker and result
backend. The worker (``celery -A bench.celery_app worker``) reads the Redis URL from
``$ENCORE_BENCH_CELERY_URL``; the bench's own client makes its app with :func:`make_app`."""
from __future__ import annotations

import os

from celery import Celery

URL_ENV = "ENCORE_BENCH_CELERY_URL"
NOOP = "bench.noop"  # the task's name, the same in the worker and the client


def make_app(url: str) -> Celery:
    app = Celery("bench", broker=url, backend=url)
    app.conf.update(task_ignore_result=False, worker_prefetch_multiplier=1,
                    broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
                    task_acks_late=False, result_expires=600)

    @app.task(name=NOOP, shared=False)  # each app its own: the client makes a second one
    def noop() -> None:
        return None

    return app


app = make_app(os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
