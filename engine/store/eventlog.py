"""The event log: append-only rows in ``event_log`` (docs/operating.md).

An event reporting a change of state is written in that change's transaction: a worker holds
its events and the store's next write on the thread inserts them, so no event outlives or
precedes the change it reports, and a fenced-off change leaves none.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, Engine

from engine.clock import utcnow
from engine.errors import ClaimLost
from engine.store.models import EVENT_TYPES, event_log
from engine.store.text import storable

log = logging.getLogger(__name__)



class LifeStep(StrEnum):
    """A step of the production's life, as its event's ``source_method`` (docs/operating.md);
    a daemon's own carry its id in ``job``."""

    START = "start"
    STOP = "stop"
    RELOAD = "reload"
    RESTART = "restart"
    ENABLE = "enable"
    DISABLE = "disable"
    RECOVER = "recover"  # a dead daemon found, and what came back from it
    LEAD = "lead"  # a lease taken or lost
    UPGRADE = "upgrade"


_LEVELS = {"Error": logging.ERROR, "Alert": logging.ERROR, "Assert": logging.ERROR,
           "Warning": logging.WARNING, "Info": logging.INFO, "Trace": logging.DEBUG}


class SqlEventLog:
    """Writes events to SQL and mirrors them to the Python log (stderr for the daemon)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._local = threading.local()

    @contextmanager
    def until_next_change(self) -> Iterator[None]:
        """Hold this thread's events for the store's next write on it. Leaving, events no
        write took are written alone, unless ClaimLost ended the block (then none is)."""
        stack = self._held_stack()
        stack.append([])
        try:
            yield
        except ClaimLost:
            stack.pop()
            raise
        except BaseException:
            self._write_left_over(stack.pop(), quietly=True)
            raise
        else:
            self._write_left_over(stack.pop(), quietly=False)

    def held(self) -> int:
        """How many events this thread holds for its next change."""
        stack = self._held_stack()
        return len(stack[-1]) if stack else 0

    def discard_held(self) -> int:
        """Forget the events this thread holds (their change was refused); how many."""
        stack = self._held_stack()
        if not stack:
            return 0
        dropped = len(stack[-1])
        stack[-1].clear()
        return dropped

    def insert_held(self, conn: Connection) -> None:
        """Insert this thread's held events in ``conn``'s transaction."""
        stack = self._held_stack()
        if stack and stack[-1]:
            conn.execute(event_log.insert(), list(stack[-1]))
            stack[-1].clear()

    def _held_stack(self) -> list[list[dict[str, Any]]]:
        stack: list[list[dict[str, Any]]] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _write_left_over(self, held: list[dict[str, Any]], *, quietly: bool) -> None:
        if not held:
            return
        try:
            with self.engine.begin() as conn:
                conn.execute(event_log.insert(), held)
        except Exception as exc:
            if not quietly:
                raise
            log.error("%d event(s) could not be written: %s", len(held), exc)

    def write(self, type_: str, text: str, *, config_name: str | None = None,
              message_id: int | None = None, session_id: int | None = None,
              source_class: str | None = None, source_method: str | None = None,
              stack: str | None = None, job: str | None = None,
              now: datetime | None = None, echo: bool = True) -> None:
        """Append one event of type ``type_``; ``echo``: also to the Python log."""
        if type_ not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type_!r}; expected one of {EVENT_TYPES}")
        text, stack = storable(text), storable(stack)
        logged = now or utcnow()
        if echo:
            _mirror(_LEVELS[type_], logged, config_name, message_id, text,
                    ("event", config_name, source_class, source_method))
        row: dict[str, Any] = {
            "time_logged": logged, "type": type_, "config_name": config_name,
            "job": job, "message_id": message_id, "session_id": session_id,
            "source_class": source_class, "source_method": source_method, "text": text,
            "stack": stack}
        held = self._held_stack()
        if held:
            held[-1].append(row)
            return
        with self.engine.begin() as conn:
            conn.execute(event_log.insert().values(**row))


def _mirror(level: int, at: datetime, item: str | None, message_id: int | None, text: str,
            kind: tuple[str | None, ...]) -> None:
    """The event on the Python log, stamped with its ``time_logged``. ``kind``: one per item
    and method, for the log's repeat filter."""
    if not log.isEnabledFor(level):
        return
    record = log.makeRecord(log.name, level, __file__, 0, "[%s] %s%s",
                            (item or "-", f"message {message_id}: " if message_id else "",
                             text), None, func="write", extra={"repeat_kind": kind})
    stamp = at.timestamp()
    record.relativeCreated += (stamp - record.created) * 1000
    record.created, record.msecs = stamp, at.microsecond // 1000 + 0.0
    log.handle(record)
