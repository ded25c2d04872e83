"""Where hosts and the engine's guards write events: the :class:`EventSink` protocol.

A module of its own, below :mod:`engine.host` and the guards of :mod:`engine.delivery`,
so that both name it without one importing the other (the SQL event log of
:mod:`engine.store.eventlog` is the sink a daemon gives them; tests give a list).
"""
from __future__ import annotations

from typing import Any, Protocol

__all__ = ["EventSink"]


class EventSink(Protocol):
    """Where hosts write events (the SQL event log, or a list in tests)."""

    def write(self, type_: str, text: str, **context: Any) -> None: ...
