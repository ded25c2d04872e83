"""Where hosts and the engine's guards write events: the :class:`EventSink` protocol.

A module of its own, below :mod:`engine.host` and the guards of :mod:`engine.delivery`,
so that both name it without one importing the other (the SQL event log of
:mod:`engine.store.eventlog` is the sink a daemon gives them; tests give a list).
"""
from __future__ import annotations

from datetime import datetime
from typing import Protocol

__all__ = ["EventSink"]


class EventSink(Protocol):
    """Where hosts write events (the SQL event log, or a list in tests)."""

    def write(self, type_: str, text: str, *, config_name: str | None = None,
              message_id: int | None = None, session_id: int | None = None,
              source_class: str | None = None, source_method: str | None = None,
              stack: str | None = None, job: str | None = None,
              now: datetime | None = None) -> None:
        """Append one event of type ``type_`` with its context (the columns of
        ``event_log``: :meth:`engine.store.eventlog.SqlEventLog.write`)."""
