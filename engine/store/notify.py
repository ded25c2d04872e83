"""Waking idle workers when work arrives, instead of at their next poll (DESIGN.md §5).

Two halves:

- :class:`QueueAnnouncer` — the sending side, used by :class:`~engine.store.sql.SqlStore`: a
  transaction that puts work in a queue calls :meth:`QueueAnnouncer.notify` before its commit
  (on PostgreSQL, ``pg_notify('encore_queue', '<target>')``, delivered only if the
  transaction commits) and :meth:`QueueAnnouncer.call_back` after it (callbacks registered in
  this process: on SQLite, the only way to wake a worker at once).
- :class:`QueueListener` — the receiving side on PostgreSQL: one thread per daemon with its
  own autocommit connection that ``LISTEN``\\ s and calls back with each target's name. It
  reconnects after a failure and then calls ``on_reconnect`` (notifications sent meanwhile
  are lost, so everyone should look at their queue).

Polling stays the fallback: a missed notification delays a message by at most
``poll_interval``.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection, Engine, func, select

log = logging.getLogger(__name__)

QUEUE_CHANNEL = "encore_queue"  # PostgreSQL NOTIFY channel; the payload is the target's name
LISTEN_TIMEOUT = 0.5  # seconds the listener waits for a notification before checking stop
RECONNECT_DELAY = 2.0  # seconds between attempts to reconnect a lost listener connection

QueueCallback = Callable[[str], object]  # called with the name of a target that has work
SWITCH_PREFIX = "switch "  # announcements of an operator's switch: "switch on|off <item>"
BREAKER_PREFIX = "breaker "  # announcements that an item's circuit breaker opened or closed


def switch_announcement(item: str, enabled: bool) -> str:
    """The announcement that item ``item`` was switched on or off (the same channel as
    work, so every daemon's listener hears it)."""
    return f"{SWITCH_PREFIX}{'on' if enabled else 'off'} {item}"


def parse_switch(payload: str) -> tuple[str, bool] | None:
    """(item, enabled) if ``payload`` announces a switch, else None (it names a target)."""
    if not payload.startswith(SWITCH_PREFIX):
        return None
    state, _, item = payload[len(SWITCH_PREFIX):].partition(" ")
    return item, state == "on"


def breaker_announcement(item: str) -> str:
    """The announcement that the circuit breaker of ``item`` opened or closed: every daemon
    reads the breaker's row again (DESIGN.md §11)."""
    return f"{BREAKER_PREFIX}{item}"


def parse_breaker(payload: str) -> str | None:
    """The item if ``payload`` announces a change of its circuit breaker, else None."""
    return payload[len(BREAKER_PREFIX):] if payload.startswith(BREAKER_PREFIX) else None


class QueueAnnouncer:
    """Announces targets that have new work: NOTIFY (PostgreSQL) and in-process callbacks."""

    def __init__(self, *, postgres: bool) -> None:
        self.postgres = postgres
        self._callbacks: list[QueueCallback] = []
        self._lock = threading.Lock()

    def add_callback(self, callback: QueueCallback) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def remove_callback(self, callback: QueueCallback) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def notify(self, conn: Connection, targets: Iterable[str]) -> None:
        """Inside a transaction: NOTIFY every daemon (PostgreSQL) once it commits."""
        if self.postgres:
            for target in sorted(set(targets)):
                conn.execute(select(func.pg_notify(QUEUE_CHANNEL, target)))

    def call_back(self, targets: Iterable[str]) -> None:
        """After the commit: run this process's callbacks. They never fail the caller."""
        with self._lock:
            callbacks = list(self._callbacks)
        for target in sorted(set(targets)):
            for callback in callbacks:
                try:
                    callback(target)
                except Exception:  # noqa: BLE001 - a wake-up must never fail a commit
                    log.exception("queue callback failed for %s", target)


class QueueListener:
    """A thread that LISTENs on ``encore_queue`` (PostgreSQL) and calls ``on_notify(target)``."""

    def __init__(self, engine: Engine, on_notify: QueueCallback, *,
                 on_reconnect: Callable[[], object] | None = None,
                 timeout: float = LISTEN_TIMEOUT) -> None:
        self.engine = engine
        self.on_notify = on_notify
        self.on_reconnect = on_reconnect
        self.timeout = timeout
        self.connected = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="queue-listener")
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening; waits up to ``timeout`` seconds for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            conn: Any = None
            try:
                conn = self._connect()
                self.connected.set()
                if self.on_reconnect is not None:
                    self.on_reconnect()
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=self.timeout):
                        self.on_notify(note.payload)
            except Exception as exc:  # noqa: BLE001 - the listener must outlive the database
                self.connected.clear()
                log.warning("queue listener lost its connection (%s); polling until it is "
                            "back, next try in %.0f s", exc, RECONNECT_DELAY)
                self._stop.wait(RECONNECT_DELAY)
            finally:
                if conn is not None:
                    _close(conn)

    def _connect(self) -> Any:
        """A psycopg connection of its own (detached from the pool), autocommit, LISTENing."""
        raw = self.engine.raw_connection()
        conn = raw.driver_connection
        raw.detach()
        try:
            conn.rollback()  # the pool's pre-ping may have opened a transaction
            conn.autocommit = True
            conn.execute(f"LISTEN {QUEUE_CHANNEL}")
        except BaseException:
            _close(conn)
            raise
        return conn


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - already broken
        pass
