"""Durable state: the SQL tables and the only code that touches SQL. The package imports
no SQLAlchemy itself, so ``encore send`` never pays for it; a change of a claimed message is
a :class:`Transition`, written by ``SqlStore.apply``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.store.transition import (
    AttemptEnd,
    Complete,
    Finish,
    Hold,
    Next,
    Requeue,
    RetryAt,
    Transition,
)

if TYPE_CHECKING:
    from engine.store.models import metadata
    from engine.store.sql import MessageRow, SqlStore

__all__ = ["AttemptEnd", "Complete", "Finish", "Hold", "MessageRow", "Next", "Requeue",
           "RetryAt", "SqlStore", "Transition", "metadata"]


def __getattr__(name: str) -> Any:
    if name == "metadata":
        from engine.store.models import metadata

        return metadata
    if name in ("MessageRow", "SqlStore"):
        from engine.store import sql

        return getattr(sql, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
