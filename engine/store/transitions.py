"""The transitions of a claimed message: attempts begun, then each change — an attempt's end,
what follows it and its events — one :class:`~engine.store.transition.Transition` written by
:meth:`StoreTransitions.apply` in one transaction, fenced by the claim's token when given."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update

from engine.store.connector import Database, check_claim, fenced_update
from engine.store.hotpath import Completion
from engine.store.models import message_attempt, message_header
from engine.store.notify import Announcement
from engine.store.rows import AttemptRow, MessageRow
from engine.store.statuses import Status
from engine.store.text import storable
from engine.store.transition import AttemptEnd, Complete, Finish, Hold, Requeue, Transition


class StoreTransitions:
    """The transition methods of :class:`~engine.store.sql.SqlStore`."""

    db: Database

    def begin_attempt(self, message_id: int, attempt: int, *, started_at: datetime,
                      durable: bool = True, token: int | None = None,
                      server: str | None = None) -> int:
        """Record that attempt ``attempt`` starts, going to ``server``; returns its id.

        ``token``: the claim's fencing token (ClaimLost, nothing recorded, if lost).
        ``durable``: commit to disk before the request can leave, so no crash hides an
        attempt that may have reached the service."""
        h = message_header.c
        with self.db.tx(durable=durable) as conn:
            changed = conn.execute(fenced_update(message_id, token).values(
                attempts=attempt, next_attempt_at=None,
                first_attempt_at=func.coalesce(h.first_attempt_at, started_at))).rowcount
            check_claim(changed, message_id, token)
            return int(conn.execute(message_attempt.insert().values(
                message_id=message_id, attempt=attempt, started_at=started_at,
                server=storable(server)).returning(message_attempt.c.id)).scalar_one())

    def note_attempt_server(self, attempt_id: int, server: str, *,
                            token: int | None = None) -> None:
        """Record the servers attempt ``attempt_id`` went to so far (a failover), before a
        request goes to the last of them. Durable; ``token`` as in :meth:`begin_attempt`."""
        with self.db.tx() as conn:
            changed = conn.execute(_fenced_attempt(attempt_id, token)
                                   .values(server=storable(server))).rowcount
            check_claim(changed, attempt_id, token, what="attempt")

    def open_attempt(self, message_id: int) -> AttemptRow | None:
        """The attempt of ``message_id`` that never ended, if any."""
        a = message_attempt.c
        with self.db.read() as conn:
            row = conn.execute(select(message_attempt).where(
                a.message_id == message_id, a.ended_at.is_(None)).order_by(a.attempt.desc())
            ).mappings().first()
        return AttemptRow.from_mapping(row) if row else None

    def attempts(self, message_id: int) -> list[AttemptRow]:
        a = message_attempt.c
        with self.db.read() as conn:
            rows = conn.execute(select(message_attempt).where(a.message_id == message_id)
                                .order_by(a.attempt)).mappings().all()
        return [AttemptRow.from_mapping(r) for r in rows]

    def apply(self, transition: Transition) -> int | None:
        """Write ``transition`` — its attempt's end, its next step, its events — in one
        transaction under its one guard, the claim's token (ClaimLost, nothing written, if the
        claim is lost), and announce what it queued or ended. Returns the id of a
        ``Completed`` message's response (None: none)."""
        applied = self.db.hot.apply(transition)
        if applied.target is not None and isinstance(transition.then, (Requeue, Hold)):
            self.db.announcer.call_back([Announcement.work(applied.target)])
        return applied.response_id

    def release(self, message_id: int, token: int | None = None) -> None:
        """Put a claimed message back in its queue as it is (graceful stop)."""
        self.apply(Transition(message_id, token, Requeue()))

    def hold(self, message_id: int, *, token: int, until: datetime,
             begun: int | None = None) -> None:
        """Put a claimed message back in its queue unsent, due at ``until`` (an open breaker).
        ``begun``: the attempt begun with its claim, taken back."""
        self.apply(Transition(message_id, token, Hold(until, begun)))

    def complete(self, request: MessageRow, *, response_class: str | None,
                 response_body: str | None, now: datetime,
                 attempt: AttemptEnd | None = None) -> int | None:
        """Mark ``request`` ``Completed``, end its ``attempt`` and store its response, fenced
        by its claim token. Returns the response's id (None: none)."""
        return self.apply(Transition(request.id, request.claim_token,
                                     Complete(now, response_class, response_body), attempt))

    def complete_many(self, completions: list[Completion], *, now: datetime,
                      durable: bool = False) -> list[int]:
        """Complete ``completions`` in one transaction (a group commit), each only where its
        claim token still holds. Returns the ids completed."""
        return (self.db.hot.complete_many(completions, now=now, durable=durable)
                if completions else [])

    def finish(self, message_id: int, *, status: str, error_text: str, now: datetime,
               token: int | None = None) -> None:
        """End a message in ``Error``, ``Suspended``, ``Discarded`` or ``Aborted``."""
        self.apply(Transition(message_id, token, Finish(status, error_text, now)))


def _fenced_attempt(attempt_id: int, token: int | None) -> Any:
    """An UPDATE of attempt ``attempt_id``, fenced by its message's claim ``token``."""
    a, h = message_attempt.c, message_header.c
    stmt = update(message_attempt).where(a.id == attempt_id)
    if token is not None:
        stmt = stmt.where(select(h.id).where(h.id == a.message_id, h.claim_token == token,
                                             h.status == Status.DELIVERED).exists())
    return stmt


def requeue() -> dict[str, Any]:
    """The values of a claimed message put back in its queue by its daemon's death (its
    delivery still counts: it never ended)."""
    return {"status": Status.QUEUED, "claimed_by": None, "lease_expires_at": None}


def ending(status: str, now: datetime, **values: Any) -> dict[str, Any]:
    """The values of a message ended at ``now`` in ``status``, plus ``values``."""
    return {"status": status, "retry_needed": False, "next_attempt_at": None,
            "time_completed": now, "claimed_by": None, "lease_expires_at": None, **values}
