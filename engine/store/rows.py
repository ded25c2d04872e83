"""Rows as the store hands them out: frozen dataclasses with aware-UTC timestamps."""
from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from engine.clock import as_utc

_TIME_COLUMNS = ("time_created", "time_processed", "time_completed", "first_attempt_at",
                 "next_attempt_at", "lease_expires_at")


@dataclass(frozen=True)
class MessageRow:
    """A ``message_header`` row as read from the store (timestamps aware UTC)."""

    id: int
    session_id: int | None
    source: str | None
    target: str
    kind: str
    body_class: str | None
    body: str | None
    status: str
    is_error: bool
    error_text: str | None
    time_created: datetime
    time_processed: datetime | None
    time_completed: datetime | None
    corresponding_id: int | None
    retry_needed: bool
    attempts: int
    first_attempt_at: datetime | None
    next_attempt_at: datetime | None
    claimed_by: str | None
    lease_expires_at: datetime | None
    claim_token: int = 0  # the fencing token of the claim this row was read with
    trace_context: str | None = None  # the producer's W3C trace context (docs/tracing.md)
    waited: bool = False  # someone waits for it to end: its end is announced

    @classmethod
    def from_mapping(cls, row: Any) -> MessageRow:
        data = {f.name: row[f.name] for f in fields(cls)}
        for name in _TIME_COLUMNS:
            data[name] = as_utc(data[name])
        return cls(**data)


@dataclass(frozen=True)
class AttemptRow:
    """A ``message_attempt`` row."""

    id: int
    message_id: int
    attempt: int
    server: str | None
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None
    status_code: int | None
    error_text: str | None

    @classmethod
    def from_mapping(cls, row: Any) -> AttemptRow:
        data = {f.name: row[f.name] for f in fields(cls)}
        data["started_at"] = as_utc(data["started_at"])
        data["ended_at"] = as_utc(data["ended_at"])
        return cls(**data)
