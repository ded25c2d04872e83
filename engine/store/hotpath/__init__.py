"""The store's hot path: intake, batch claims, group-committed completions and the
transitions of a claimed message, each prebuilt statements per dialect on a driver connection
of its own, skipping SQLAlchemy (docs/architecture.md, "Throughput"). Timestamps are aware
UTC in and out.
"""
from __future__ import annotations

from engine.store.hotpath.base import (
    Accepted,
    Applied,
    Claimed,
    Completion,
    Grant,
    HotPath,
    Intake,
    Outcome,
    Taker,
)
from engine.store.hotpath.postgres import PostgresHotPath
from engine.store.hotpath.sqlite import SqliteHotPath

__all__ = ["Accepted", "Applied", "Claimed", "Completion", "Grant", "HotPath", "Intake",
           "Outcome", "PostgresHotPath", "SqliteHotPath", "Taker"]
