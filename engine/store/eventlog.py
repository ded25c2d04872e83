"""The event log: append-only rows in ``event_log`` (docs/operating.md).

An event reporting a change of a message travels in that change's
:class:`~engine.store.transition.Transition`, written in its transaction, so no event outlives
or precedes the change it reports, and a fenced-off change leaves none; any other event is
written at once.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import Engine

from engine.clock import utcnow
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


@dataclass(frozen=True)
class Event:
    """One row of ``event_log``, made by :func:`event`."""

    time_logged: datetime
    type: str
    text: str
    config_name: str | None = None
    job: str | None = None
    message_id: int | None = None
    session_id: int | None = None
    source_class: str | None = None
    source_method: str | None = None
    stack: str | None = None


def event(type_: str, text: str, *, config_name: str | None = None,
          message_id: int | None = None, session_id: int | None = None,
          source_class: str | None = None, source_method: str | None = None,
          stack: str | None = None, job: str | None = None, now: datetime | None = None,
          echo: bool = True) -> Event:
    """An event of type ``type_``, stamped ``now`` (default: the wall clock); ``echo``: also
    on the Python log, at once."""
    if type_ not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type_!r}; expected one of {EVENT_TYPES}")
    text, stack = storable(text), storable(stack)
    logged = now or utcnow()
    if echo:
        _mirror(_LEVELS[type_], logged, config_name, message_id, text,
                ("event", config_name, source_class, source_method))
    return Event(logged, type_, text, config_name, job, message_id, session_id, source_class,
                 source_method, stack)


class SqlEventLog:
    """Writes events to SQL and mirrors them to the Python log (stderr for the daemon). An
    event reporting a change of a message goes in that change's
    :class:`~engine.store.transition.Transition` instead."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def write(self, type_: str, text: str, *, config_name: str | None = None,
              message_id: int | None = None, session_id: int | None = None,
              source_class: str | None = None, source_method: str | None = None,
              stack: str | None = None, job: str | None = None,
              now: datetime | None = None, echo: bool = True) -> None:
        """Append one event of type ``type_`` in a transaction of its own; ``echo``: also to
        the Python log."""
        row = event(type_, text, config_name=config_name, message_id=message_id,
                    session_id=session_id, source_class=source_class,
                    source_method=source_method, stack=stack, job=job, now=now, echo=echo)
        with self.engine.begin() as conn:
            conn.execute(event_log.insert().values(**dataclasses.asdict(row)))


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
