"""The transitions of a claimed message: attempts begun and ended, a retry scheduled, put back,
held, ``Completed`` or ended otherwise. Each is one transaction, fenced by the claim's token
when given."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, case, func, select, update

from engine.store.connector import Database, check_claim, fenced_update
from engine.store.hotpath import AttemptEnding, Completion
from engine.store.models import message_attempt, message_header
from engine.store.notify import Announcement, done_announcements
from engine.store.rows import AttemptEnd, AttemptRow, MessageRow
from engine.store.statuses import Status
from engine.store.text import storable


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

    def end_attempt(self, attempt_id: int, *, ended_at: datetime, outcome: str,
                    server: str | None = None, status_code: int | None = None,
                    error_text: str | None = None, started_at: datetime | None = None,
                    token: int | None = None, defer: bool = False) -> None:
        """Record the end of an attempt, and its true start when ``started_at`` is given
        (also the header's ``first_attempt_at`` for attempt 1). Not durable: lost, the attempt
        looks unfinished (outcome unknown). ``server``: the servers it went to (None: none).

        ``defer``: written in this thread's next change of a message, never alone, so a
        failed attempt is never on record as ended without what it led to.
        :meth:`drop_deferred` forgets what no change took."""
        a, h = message_attempt.c, message_header.c
        ending = AttemptEnding(attempt_id, ended_at, outcome, storable(server), status_code,
                               storable(error_text), started_at, token)
        def write(conn: Connection) -> None:
            changed = self.db.hot.end_attempt_in(conn.connection.driver_connection, ending)
            check_claim(changed, attempt_id, token, what="attempt")
            if started_at is not None:
                first = select(a.message_id).where(a.id == attempt_id, a.attempt == 1)
                conn.execute(update(message_header).where(h.id == first.scalar_subquery())
                             .values(first_attempt_at=started_at))
        if defer:
            self.db.deferred().append(write)
            return
        with self.db.tx(durable=False) as conn:
            write(conn)

    def drop_deferred(self) -> int:
        """Forget this thread's deferred attempt ends; returns how many."""
        deferred = self.db.deferred()
        dropped = len(deferred)
        deferred.clear()
        return dropped

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

    def schedule_retry(self, message_id: int, *, next_attempt_at: datetime, release: bool,
                       token: int | None = None) -> None:
        """Persist the retry flag and the next attempt time; ``release`` parks the message
        back in its queue."""
        values: dict[str, Any] = (
            {"retry_needed": True, **requeue(due=next_attempt_at)} if release
            else {"retry_needed": True, "next_attempt_at": next_attempt_at})
        self._update(message_id, announce=release, token=token, **values)

    def release(self, message_id: int, token: int | None = None) -> None:
        """Put a claimed message back in its queue as it is (graceful stop)."""
        self._update(message_id, announce=True, token=token, **requeue())

    def hold(self, message_id: int, *, token: int, until: datetime,
             begun: int | None = None) -> None:
        """Put a claimed message back in its queue unsent, due at ``until`` (an open breaker).
        ``begun``: the attempt begun with its claim, taken back."""
        h, a = message_header.c, message_attempt.c
        values = requeue(due=until)
        if begun is not None:
            values.update(attempts=h.attempts - 1, first_attempt_at=case(
                (h.attempts == 1, None), else_=h.first_attempt_at))
        with self.db.tx() as conn:
            target: str | None = conn.execute(fenced_update(message_id, token)
                                              .values(**values).returning(h.target)).scalar()
            check_claim(0 if target is None else 1, message_id, token)
            assert target is not None
            if begun is not None:
                conn.execute(message_attempt.delete().where(a.id == begun,
                                                            a.message_id == message_id))
            self.db.announcer.notify(conn, [Announcement.work(target)])
        self.db.announcer.call_back([Announcement.work(target)])

    def complete(self, request: MessageRow, *, response_class: str | None,
                 response_body: str | None, now: datetime,
                 attempt: AttemptEnd | None = None) -> int | None:
        """Mark ``request`` ``Completed``, end its ``attempt`` and store its response, in one
        transaction fenced by its claim token. Returns the response's id (None: none)."""
        if attempt is None:
            completion = Completion(request.id, request.claim_token, None, None, None, None,
                                    response_class, response_body)
        else:
            completion = Completion(request.id, request.claim_token, attempt.attempt_id,
                                    attempt.started_at, attempt.ended_at, attempt.server,
                                    response_class, response_body)
        with self.db.tx(durable=False, changes=True) as conn:
            driver = conn.connection.driver_connection
            done, waited = self.db.hot.complete_in(driver, [completion], now=now)
            check_claim(len(done), request.id, request.claim_token)
        self.db.hot.after_completion([completion], waited)
        return done[request.id]

    def complete_many(self, completions: list[Completion], *, now: datetime,
                      durable: bool = False) -> list[int]:
        """Complete ``completions`` in one transaction (a group commit), each only where its
        claim token still holds. Returns the ids completed."""
        return (self.db.hot.complete_many(completions, now=now, durable=durable)
                if completions else [])

    def finish(self, message_id: int, *, status: str, error_text: str, now: datetime,
               token: int | None = None) -> None:
        """End a message in ``Error``, ``Suspended``, ``Discarded`` or ``Aborted``."""
        self._update(message_id, token=token, ends=True,
                     **ending(status, now, is_error=status == Status.ERROR,
                              error_text=storable(error_text)))

    def _update(self, message_id: int, *, announce: bool = False, ends: bool = False,
                token: int | None = None, **values: Any) -> None:
        """One UPDATE of ``message_id``; ``announce``: it queues work; ``ends``: it ends the
        message."""
        h = message_header.c
        with self.db.tx(changes=True) as conn:
            found = conn.execute(fenced_update(message_id, token)
                                 .values(**values).returning(h.target, h.waited)).first()
            check_claim(0 if found is None else 1, message_id, token)
            news = []
            if found is not None and announce:
                news.append(Announcement.work(found.target))
            done = ends and found is not None and found.waited
            if done:
                news.extend(done_announcements([message_id]))
            self.db.announcer.notify(conn, news)
        if news:
            self.db.announcer.call_back(news)


def _fenced_attempt(attempt_id: int, token: int | None) -> Any:
    """An UPDATE of attempt ``attempt_id``, fenced by its message's claim ``token``."""
    a, h = message_attempt.c, message_header.c
    stmt = update(message_attempt).where(a.id == attempt_id)
    if token is not None:
        stmt = stmt.where(select(h.id).where(h.id == a.message_id, h.claim_token == token,
                                             h.status == Status.DELIVERED).exists())
    return stmt


# the delivery that claimed a message put back ended, so it no longer counts
_DELIVERY_ENDED = case((message_header.c.deliveries > 0, message_header.c.deliveries - 1),
                       else_=0)


def requeue(*, delivery_ended: bool = True, due: datetime | None = None) -> dict[str, Any]:
    """The values of a claimed message put back in its queue, due at ``due`` if given.
    ``delivery_ended``: False when its daemon died, which keeps the delivery counted."""
    values: dict[str, Any] = {"status": Status.QUEUED, "claimed_by": None,
                              "lease_expires_at": None}
    if delivery_ended:
        values["deliveries"] = _DELIVERY_ENDED
    if due is not None:
        values["next_attempt_at"] = due
    return values


def ending(status: str, now: datetime, **values: Any) -> dict[str, Any]:
    """The values of a message ended at ``now`` in ``status``, plus ``values``."""
    return {"status": status, "retry_needed": False, "next_attempt_at": None,
            "time_completed": now, "claimed_by": None, "lease_expires_at": None, **values}
