"""The store's hot path: intake, batch claims and group-committed completions, each one
prebuilt statement on a driver connection of its own (docs/architecture.md, "Throughput").

Everything else in the store goes through SQLAlchemy Core. These few statements run for every
message, so they skip it: the SQL is written once per dialect, parameters are plain values,
and rows come back as tuples. :class:`SqliteHotPath` runs a step as one ``BEGIN IMMEDIATE``
transaction in-process (an intake as one statement in autocommit mode);
:class:`PostgresHotPath` runs each step as one statement on an
autocommit connection (a CTE where a step changes several tables), so a step costs one round
trip, with ``synchronous_commit`` off except where a promise rests on the commit.

Timestamps are aware UTC in and out; SQLite stores them as SQLAlchemy does (naive UTC text).
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
