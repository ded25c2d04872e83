"""Durable state: the SQL tables and the only code that touches SQL. The package imports
nothing itself, so ``encore send`` never pays for SQLAlchemy."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.store.models import metadata
    from engine.store.sql import MessageRow, SqlStore

__all__ = ["MessageRow", "SqlStore", "metadata"]


def __getattr__(name: str) -> Any:
    if name == "metadata":
        from engine.store.models import metadata

        return metadata
    if name in ("MessageRow", "SqlStore"):
        from engine.store import sql

        return getattr(sql, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
