"""The :class:`EventSink` protocol, below hosts and guards so both name it without importing
each other."""
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
        """Append one event of type ``type_`` with its context."""
