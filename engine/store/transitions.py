"""A store's transitions of a claimed message: its attempts begun and ended, and its next
state — a retry scheduled, put back in its queue, held, ``Completed`` (the one statement of
:mod:`engine.store.statements`) or ended otherwise. Each is one transaction, fenced by the
claim's token when one is given, which also takes the events and writes the thread holds for
its next change (:meth:`~engine.store.connector.Database.tx`)."""
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
        """Record that attempt ``attempt`` starts now (before anything is sent), going to
        ``server`` (the adapter's pick; None: no adapter) — in the one write, so that a
        process killed during the attempt leaves its server on record.

        ``token``: the claim's fencing token; raises ClaimLost (and records nothing) when the
        message's claim is no longer that one, so that nothing is sent.

        ``durable`` (the default, and what the worker uses): the commit reaches disk before
        the request can leave, so that even a database server crash cannot hide an attempt
        that may have reached the service. That commit also makes every earlier
        asynchronous one durable.
        """
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
        """Record the servers attempt ``attempt_id`` went to so far (``servers_text``), before
        a request goes to the last of them — a failover within the attempt, or a server
        other than the one its start recorded. Durable, as the start is. ``token``: raises
        ClaimLost (and records nothing) when the claim is no longer that one."""
        with self.db.tx() as conn:
            changed = conn.execute(_fenced_attempt(attempt_id, token)
                                   .values(server=storable(server))).rowcount
            check_claim(changed, attempt_id, token, what="attempt")

    def end_attempt(self, attempt_id: int, *, ended_at: datetime, outcome: str,
                    server: str | None = None, status_code: int | None = None,
                    error_text: str | None = None, started_at: datetime | None = None,
                    token: int | None = None, defer: bool = False) -> None:
        """Record the end of an attempt (and its true start, when ``started_at`` is given:
        an attempt begun with a batch claim starts when its request does — for attempt 1
        the header's ``first_attempt_at`` is set to it in the same transaction, so that it
        stays ``min(message_attempt.started_at)``). Not durable on its own: lost in a server
        crash, the attempt looks unfinished and is treated as outcome unknown, and both
        times keep the claim's (equal) value. ``token``: raises ClaimLost when the claim is
        no longer that one. ``server``: the servers it went to, as the adapter reports them
        (None: none — what its start recorded is cleared, no request left).

        ``defer`` (a failed attempt, in the worker): written by this thread's next change of
        a message (a retry's schedule, a give-up, a release, a completion), in its
        transaction, never alone — so that a failed attempt is never on record as ended
        without what it led to. If that change fails (a full disk, a lost connection), the
        attempt stays open and the next delivery treats it as outcome unknown, instead of
        taking the message for a decided retry (and re-sending a non-idempotent request).
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
        """Forget this thread's deferred attempt ends (:meth:`end_attempt`) that no change
        took: those attempts stay open (outcome unknown). Returns how many."""
        deferred = self.db.deferred()
        dropped = len(deferred)
        deferred.clear()
        return dropped

    def open_attempt(self, message_id: int) -> AttemptRow | None:
        """The attempt of ``message_id`` that never ended (in flight at a crash), if any."""
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
        """Persist the retry-needed flag and the next attempt time. ``release`` parks the
        message back in the queue (requeue mode, or a stop during a blocking wait).
        ``token``: raises ClaimLost when the claim is no longer that one."""
        values: dict[str, Any] = (
            {"retry_needed": True, **requeue(due=next_attempt_at)} if release
            else {"retry_needed": True, "next_attempt_at": next_attempt_at})
        self._update(message_id, announce=release, token=token, **values)

    def release(self, message_id: int, token: int | None = None) -> None:
        """Put a claimed message back in its queue as it is (graceful stop); its delivery
        ended, so it no longer counts (see :meth:`claim`). ``token``: only if the claim is
        still that one (else ClaimLost)."""
        self._update(message_id, announce=True, token=token, **requeue())

    def hold(self, message_id: int, *, token: int, until: datetime,
             begun: int | None = None) -> None:
        """Put a claimed message back in its queue unsent, due at ``until`` (an observer held
        it: an open breaker). ``begun``: the attempt begun with its claim, which never
        started — it is taken back (the row deleted, the count restored). The retry state
        and ``first_attempt_at`` of earlier attempts stay, so FailureTimeout keeps running.
        Raises ClaimLost when the claim is no longer ``token``."""
        h, a = message_header.c, message_attempt.c
        values = requeue(due=until)
        if begun is not None:
            values.update(attempts=h.attempts - 1, first_attempt_at=case(
                (h.attempts == 1, None), else_=h.first_attempt_at))
        with self.db.tx() as conn:
            target: str | None = conn.execute(fenced_update(message_id, token)
                                              .values(**values).returning(h.target)).scalar()
            check_claim(0 if target is None else 1, message_id, token)
            assert target is not None  # else check_claim raised: the token is given
            if begun is not None:
                conn.execute(message_attempt.delete().where(a.id == begun,
                                                            a.message_id == message_id))
            self.db.announcer.notify(conn, [Announcement.work(target)])
        self.db.announcer.call_back([Announcement.work(target)])

    def complete(self, request: MessageRow, *, response_class: str | None,
                 response_body: str | None, now: datetime,
                 attempt: AttemptEnd | None = None) -> int | None:
        """Mark ``request`` ``Completed``, end its last ``attempt`` (outcome ok) and store its
        response, if any, linked both ways — in one transaction, which also takes the events
        and writes this thread holds for its next change, and with the statement every
        success goes through (:meth:`complete_many`): only while the claim is still
        ``request.claim_token`` (else ClaimLost, nothing written). Not durable on its own:
        lost in a server crash, the attempt looks unfinished (outcome unknown). Returns the
        response's id (None: no response)."""
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
            check_claim(len(done), request.id, request.claim_token)  # rolls all back
        self.db.hot.after_completion([completion], waited)
        return done[request.id]

    def complete_many(self, completions: list[Completion], *, now: datetime,
                      durable: bool = False) -> list[int]:
        """Record successful attempts in one transaction (a group commit): each message
        ``Completed``, its attempt ended (outcome ok, true start and end) and its response
        stored, linked both ways — only where the claim is still the completion's token.
        Returns the ids completed; the others' claims were lost and nothing was written
        for them. Not durable on its own (see :meth:`complete`) unless ``durable``."""
        return (self.db.hot.complete_many(completions, now=now, durable=durable)
                if completions else [])

    def finish(self, message_id: int, *, status: str, error_text: str, now: datetime,
               token: int | None = None) -> None:
        """End a message in ``Error``, ``Suspended``, ``Discarded`` or ``Aborted``.
        ``token``: only if the claim is still that one (else ClaimLost)."""
        self._update(message_id, token=token, ends=True,
                     **ending(status, now, is_error=status == Status.ERROR,
                              error_text=storable(error_text)))

    def _update(self, message_id: int, *, announce: bool = False, ends: bool = False,
                token: int | None = None, **values: Any) -> None:
        """One UPDATE of ``message_id``; ``announce``: it puts work in the queue; ``ends``:
        it ends the message (whose end is announced if someone waits for it)."""
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
    """An UPDATE of attempt ``attempt_id``, only while its message's claim of ``token``
    holds it (when given; see :func:`~engine.store.connector.fenced_update`)."""
    a, h = message_attempt.c, message_header.c
    stmt = update(message_attempt).where(a.id == attempt_id)
    if token is not None:
        stmt = stmt.where(select(h.id).where(h.id == a.message_id, h.claim_token == token,
                                             h.status == Status.DELIVERED).exists())
    return stmt


# ``deliveries`` of a message put back in its queue by the delivery that claimed it: that
# delivery ended, so it no longer counts (the claim counted it; see SqlStore.claim).
_DELIVERY_ENDED = case((message_header.c.deliveries > 0, message_header.c.deliveries - 1),
                       else_=0)


# The values of the transitions written with SQLAlchemy Core, each spelled once here (the
# per-message ones, Completed among them, are in engine.store.statements).
def requeue(*, delivery_ended: bool = True, due: datetime | None = None) -> dict[str, Any]:
    """The values of a claimed message put back in its queue: ``Queued``, claimed by nobody,
    no lease; ``due``: not before then (a retry parked, a message held), else as it was.
    ``delivery_ended``: the delivery that claimed it gave it back, so that delivery no
    longer counts (``deliveries`` one less); False when it never ended (its daemon died, or
    lost track of it), which keeps it counted (see :meth:`SqlStore.claim`)."""
    values: dict[str, Any] = {"status": Status.QUEUED, "claimed_by": None,
                              "lease_expires_at": None}
    if delivery_ended:
        values["deliveries"] = _DELIVERY_ENDED
    if due is not None:
        values["next_attempt_at"] = due
    return values


def ending(status: str, now: datetime, **values: Any) -> dict[str, Any]:
    """The values of a message ended at ``now`` in ``status`` (``Error``, ``Suspended``,
    ``Discarded``, ``Aborted``) — by its worker or an operator: no retry, no next attempt,
    claimed by nobody, no lease; ``values``: more columns to set."""
    return {"status": status, "retry_needed": False, "next_attempt_at": None,
            "time_completed": now, "claimed_by": None, "lease_expires_at": None, **values}
