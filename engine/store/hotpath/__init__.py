"""The store's hot path: intake, batch claims and group-committed completions, each one
prebuilt statement per dialect on a driver connection of its own, skipping SQLAlchemy
(docs/architecture.md, "Throughput"). Timestamps are aware UTC in and out.
"""
from __future__ import annotations

from engine.store.hotpath.base import (
    Accepted,
    AttemptEnding,
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

__all__ = ["Accepted", "AttemptEnding", "Claimed", "Completion", "Grant", "HotPath", "Intake",
           "Outcome", "PostgresHotPath", "SqliteHotPath", "Taker"]
