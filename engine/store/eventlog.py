"""The event log: append-only rows in ``event_log`` (DESIGN.md §6)."""
from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import Engine

from engine.clock import utcnow
from engine.store.models import EVENT_TYPES, event_log

log = logging.getLogger(__name__)

_LEVELS = {"Error": logging.ERROR, "Alert": logging.ERROR, "Assert": logging.ERROR,
           "Warning": logging.WARNING, "Info": logging.INFO, "Trace": logging.DEBUG}


class SqlEventLog:
    """Writes events to SQL and mirrors them to the Python log (stderr for the daemon)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def write(self, type_: str, text: str, *, config_name: str | None = None,
              message_id: int | None = None, session_id: int | None = None,
              source_class: str | None = None, source_method: str | None = None,
              stack: str | None = None, job: str | None = None,
              now: datetime | None = None) -> None:
        """Append one event of type ``type_`` (Assert, Error, Warning, Info, Trace, Alert)."""
        if type_ not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type_!r}; expected one of {EVENT_TYPES}")
        log.log(_LEVELS[type_], "[%s] %s%s", config_name or "-",
                f"message {message_id}: " if message_id else "", text)
        with self.engine.begin() as conn:
            conn.execute(event_log.insert().values(
                time_logged=now or utcnow(), type=type_, config_name=config_name, job=job,
                message_id=message_id, session_id=session_id, source_class=source_class,
                source_method=source_method, text=text, stack=stack))
