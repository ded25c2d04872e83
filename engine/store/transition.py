"""A transition of a claimed message: how its attempt ended, what happens next and the events
reporting it, written together by :meth:`~engine.store.sql.SqlStore.apply` or not at all.

Plain values, without SQLAlchemy, so the hot path that writes them stays importable by
``encore send``.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.store.eventlog import Event

__all__ = ["AttemptEnd", "Complete", "Finish", "Hold", "Next", "Requeue", "RetryAt",
           "Transition"]


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended. ``started_at``: its true start (None: as its begin recorded it),
    also the message's ``first_attempt_at`` for attempt 1."""

    attempt_id: int
    ended_at: datetime
    server: str | None = None  # the servers it went to (None: none)
    outcome: str = "ok"
    status_code: int | None = None
    error_text: str | None = None
    started_at: datetime | None = None


@dataclass(frozen=True)
class Complete:
    """``Completed`` at ``now``, with its response (``response_body`` None: none)."""

    now: datetime
    response_class: str | None = None
    response_body: str | None = None


@dataclass(frozen=True)
class Requeue:
    """Back in its queue, due at ``due`` (None: as it was); ``retry``: a parked retry, with
    ``retry_needed`` set. Its delivery no longer counts."""

    due: datetime | None = None
    retry: bool = False


@dataclass(frozen=True)
class RetryAt:
    """A blocking retry: the claim stays, ``retry_needed`` set, next attempt at ``due``."""

    due: datetime


@dataclass(frozen=True)
class Hold:
    """Back in its queue unsent, due at ``until`` (an open breaker, a stop); ``begun``: the
    attempt begun with its claim, taken back."""

    until: datetime
    begun: int | None = None


@dataclass(frozen=True)
class Finish:
    """Ended at ``now`` in ``status`` (``Error``, ``Suspended``, ``Discarded`` or
    ``Aborted``)."""

    status: str
    error_text: str
    now: datetime


Next = Complete | Requeue | RetryAt | Hold | Finish


@dataclass(frozen=True)
class Transition:
    """One change of message ``message_id``, fenced by its claim ``token`` (None: unfenced):
    ``attempt`` ended, ``then`` done (None: the attempt's end alone) and ``events`` written."""

    message_id: int
    token: int | None
    then: Next | None = None
    attempt: AttemptEnd | None = None
    events: tuple[Event, ...] = ()
