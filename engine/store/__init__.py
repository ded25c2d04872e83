"""Durable state: the SQL tables users query, and the only code that touches SQL."""
from __future__ import annotations

from engine.store.models import metadata
from engine.store.sql import MessageRow, SqlStore

__all__ = ["MessageRow", "SqlStore", "metadata"]
