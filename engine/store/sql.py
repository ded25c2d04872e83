"""SqlStore: the message queue, attempts and claims, on SQLite or PostgreSQL.

Every method is one short transaction named after what it does, but for two that run two in
turn: :meth:`SqlStore.heartbeat` (the daemon's row, then its leases) and
:meth:`SqlStore.claim_next` (expired claims taken back, then the claim). Claims are single
``UPDATE … WHERE id = (SELECT … LIMIT 1 [FOR UPDATE SKIP LOCKED]) RETURNING`` statements, so
several workers and several daemons can share a queue without taking a message twice.

A transaction that puts work in a queue (a new message, one released or parked) *announces*
its target, and one that ends a message someone waits for announces its end
(:mod:`engine.store.notify`): callbacks registered in this process run after the commit; on
PostgreSQL a NOTIFY in the same transaction reaches every process that listens, on SQLite the
doorbell (:mod:`engine.store.doorbell`) rings the other processes after the commit. So idle
workers and waiters wake at once instead of at their next poll (:mod:`engine.store.completions`).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, case, func, or_, select, true, tuple_, update

from engine.clock import as_utc, utcnow
from engine.store import migrate
from engine.store.breaker import SqlBreakers
from engine.store.completions import CompletionHub
from engine.store.connector import (
    Database,
    Transaction,
    check_claim,
    fenced_update,
    work_announcements,
)
from engine.store.database import create_db_engine
from engine.store.group import GroupCommit, commit_together
from engine.store.hotpath import Accepted, Claimed, Completion, Intake, Outcome, Taker
from engine.store.leases import SqlLeases
from engine.store.models import (
    clock_frame,
    daemon,
    item_state,
    message_attempt,
    message_header,
)
from engine.store.notify import (
    Announcement,
    AnnouncementCallback,
    QueueListener,
    done_announcements,
)
from engine.store.ratelimit import SqlRateBuckets
from engine.store.rows import AttemptEnd, AttemptRow, MessageRow
from engine.store.statuses import Status
from engine.store.text import storable

__all__ = ["Accepted", "AttemptRow", "Claimed", "Completion", "MessageRow", "SqlStore"]

log = logging.getLogger(__name__)

LISTEN_WAIT = 5.0  # seconds hear_other_processes waits for the PostgreSQL listener to connect


class SqlStore:
    """The durable store of one production. ``url`` is an SQLAlchemy URL."""

    def __init__(self, url: str, *, engine: Engine | None = None) -> None:
        self.url = url
        self.db = Database(engine or create_db_engine(url))  # what the sibling modules share
        self.engine = self.db.engine
        self.events = self.db.events
        self.is_postgres = self.db.is_postgres
        self.leases = SqlLeases(self.db)
        self.breakers = SqlBreakers(self.db)  # circuit breakers (item_breaker)
        self.rate_buckets = SqlRateBuckets(self.db)  # rate-limit token buckets (item_rate)
        # waiters on messages, woken by the announcements of their end
        self.completions = CompletionHub(on_first_watch=self.hear_other_processes)
        self.db.hot.on_completed = self.completions.completed
        self.db.announcer.add_callback(self.completions.hear)
        # items of this process that take waited-for messages as they are accepted (SQLite:
        # engine.delivery.dispatch registers them; docs/waiting.md, "Direct takes")
        self.takers: dict[str, Taker] = {}
        self._listener: QueueListener | None = None  # PostgreSQL: hears other processes
        self._reconnect_hooks: list[Callable[[], object]] = [self.completions.wake_all]
        self._hearing_lock = threading.Lock()
        self._hearers = 0  # hear_other_processes() calls not undone
        # durable intakes that arrive together (the portal's threads, processes) share one
        # commit; a caller alone commits at once
        self.intake: GroupCommit[Intake, Accepted] = GroupCommit(
            self._accept_one, lambda intakes: self.db.hot.accept_many(intakes))

    # -- schema --------------------------------------------------------------------------
    def upgrade(self) -> None:
        """Create or upgrade every table (Alembic, to head). Safe when several processes run
        it at once; refuses a database migrated by a newer Encore."""
        migrate.upgrade(self.engine)

    def check_schema(self) -> None:
        """Raise StoreError unless the database is at the revision this code knows: an older
        schema asks for ``encore db upgrade``, a newer one for a newer Encore."""
        migrate.check(self.engine)

    def db_now(self) -> datetime:
        """The database server's current time (aware UTC). SQLite has no server: its clock
        is this host's."""
        if not self.is_postgres:
            return utcnow()
        with self.db.read() as conn:
            value: datetime = conn.execute(select(func.clock_timestamp())).scalar_one()
        return as_utc(value)

    def dispose(self) -> None:
        with self._hearing_lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        self.db.dispose()

    # -- intake --------------------------------------------------------------------------
    def enqueue(self, *, target: str, body_class: str | None, body: str, source: str | None = None,
                session_id: int | None = None, now: datetime | None = None) -> int:
        """Commit a new request for ``target`` (durably) and return its id. Starts a session
        if ``session_id`` is None (the session id is then the message's own id)."""
        return self.accept(target=target, body_class=body_class, body=body, source=source,
                           session_id=session_id, now=now).id

    def accept(self, *, target: str, body_class: str | None, body: str,
               source: str | None = None, session_id: int | None = None,
               now: datetime | None = None, idempotency_key: str | None = None,
               trace_context: str | None = None, waited: bool = False,
               durable: bool = True, search_paths: Sequence[str] = ()) -> Accepted:
        """:meth:`enqueue`, with an ``idempotency_key``: when a message for ``target`` with
        that key exists already (also one committed by a racing duplicate, on any daemon),
        nothing is created and that message is returned (``created`` False). The key is kept
        as long as its message. ``trace_context``: the producer's W3C trace context.
        ``waited``: the caller will wait for the message to end (see :meth:`mark_waited`);
        its work is announced as urgent, so a dispatcher claims it without lingering.
        ``durable=False``: the commit does not wait for the disk — only for a message whose
        loss in a crash of the machine is recovered otherwise (a business process's call:
        the process's own attempt is then outcome unknown and sends it again).
        ``search_paths``: the target's search properties, indexed with the message."""
        if waited and not search_paths:
            taker = self.takers.get(target)
            if taker is not None:
                accepted = self._take_directly(taker, target, body_class, body, source,
                                               session_id, now or utcnow(), idempotency_key,
                                               trace_context, durable)
                if accepted is not None:
                    return accepted
        intake = Intake(target, body_class, body, source, session_id, now or utcnow(),
                        idempotency_key, trace_context, waited, tuple(search_paths))
        accepted = self.intake.submit(intake) if durable else self._accept_one(intake, False)
        if accepted.created:  # PostgreSQL: NOTIFY went with the INSERT
            self.db.announcer.call_back([Announcement.work(target, urgent=waited)])
        elif waited:
            self.mark_waited(accepted.id)
        return accepted

    def accept_batch(self, intakes: Sequence[Intake]) -> list[Accepted | BaseException]:
        """:meth:`accept` of each of ``intakes`` (durably, none taken directly) in one
        transaction, for a caller that batches them itself (an event loop's intake,
        :mod:`engine.serving.batch_intake`); each result in order, an Accepted or the error
        of that intake alone: if the batch fails as a whole, each is tried on its own."""
        results = commit_together(intakes, self._accept_one, self.db.hot.accept_many)
        work: dict[str, bool] = {}  # target → urgent
        for intake, result in zip(intakes, results):
            if isinstance(result, Accepted):
                if result.created:
                    work[intake.target] = work.get(intake.target, False) or intake.waited
                elif intake.waited:
                    self.mark_waited(result.id)
        if work:  # PostgreSQL: NOTIFY went with the INSERTs
            self.db.announcer.call_back([Announcement.work(target, urgent=urgent)
                                         for target, urgent in work.items()])
        return results

    def add_taker(self, target: str, taker: Taker) -> bool:
        """Let ``taker`` take ``target``'s waited-for messages as they are accepted here
        (:meth:`_take_directly`); False where the driver cannot (PostgreSQL, for now)."""
        if not self.db.hot.direct_takes:
            return False
        self.takers[target] = taker
        return True

    def remove_taker(self, target: str, taker: Taker) -> None:
        """Undo :meth:`add_taker` (at the item's stop)."""
        if self.takers.get(target) is taker:
            del self.takers[target]

    def _take_directly(self, taker: Taker, target: str, body_class: str | None, body: str,
                       source: str | None, session_id: int | None, now: datetime,
                       idempotency_key: str | None, trace_context: str | None,
                       durable: bool) -> Accepted | None:
        """A direct take (docs/waiting.md): a waited-for message whose item runs in this
        process with a worker free is claimed by the transaction that accepts it and handed
        to that worker — no announcement, no wake-up, no claim of its own. None: the item
        has no worker free now; the message is accepted as any other."""
        grant = taker.reserve()
        if grant is None:
            return None
        try:
            accepted, claimed = self.db.hot.accept_claimed(
                target, body_class, body, source=source, session_id=session_id, now=now,
                idempotency_key=idempotency_key, trace_context=trace_context,
                durable=durable, grant=grant)
        except BaseException:
            taker.release()
            raise
        if claimed is not None:
            taker.take(claimed)
            return accepted
        taker.release()
        if not accepted.created:  # the key's earlier message: someone waits for it now
            self.mark_waited(accepted.id)
        else:  # switched off, or FIFO with a message ahead: queued
            self.db.announcer.call_back([Announcement.work(target, urgent=True)])
        return accepted

    def _accept_one(self, intake: Intake, durable: bool = True) -> Accepted:
        return self.db.hot.accept(intake.target, intake.body_class, intake.body,
                                source=intake.source, session_id=intake.session_id,
                                now=intake.now, idempotency_key=intake.idempotency_key,
                                trace_context=intake.trace_context, waited=intake.waited,
                                durable=durable, search_paths=intake.search_paths)

    def enqueue_many(self, *, target: str, bodies: list[tuple[str | None, str]],
                     source: str | None = None, session_id: int | None = None,
                     now: datetime | None = None,
                     trace_context: str | None = None,
                     search_paths: Sequence[str] = ()) -> list[int]:
        """Commit new requests for ``target`` (``(body_class, body)`` pairs) in one durable
        transaction; return their ids in order. Each starts its own session unless
        ``session_id`` is given. ``trace_context``: the producer's, stored with each;
        ``search_paths``: the target's search properties, indexed with each."""
        if not bodies:
            return []
        ids = self.db.hot.enqueue_many(target, bodies, source=source, session_id=session_id,
                                     now=now or utcnow(), trace_context=trace_context,
                                     search_paths=search_paths)
        self.db.announcer.call_back([Announcement.work(target)])  # PostgreSQL: with the INSERT
        return ids

    # -- claims --------------------------------------------------------------------------
    def claim(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
              limit: int = 1, fifo: bool = False, begin: bool = False,
              enabled: bool = True, held: Sequence[int] = (),
              alone: bool = True, server: str | None = None) -> list[Claimed]:
        """Take up to ``limit`` due messages of ``target`` in one statement, oldest first:
        ``Delivered``, leased to ``owner`` until ``now + lease_seconds``, each with a new
        fencing token (``MessageRow.claim_token``) that every later write about it must
        carry. Nothing while an operator has switched the item off (else ``enabled``, the
        production file's switch, holds).

        ``fifo``: only the head of the queue, in order — never past a message held by a
        claim or waiting for its next attempt (a FIFO item: its item lease makes the caller
        the only daemon that claims it); ``held``: the ids the caller holds already (it
        delivers them first, in order), which do not stop the claim. ``begin``: attempt 1
        of every message never attempted begins at ``now`` with the claim (for idempotent
        items: a crash turns it into an outcome-unknown attempt, which they re-send); its id
        is ``Claimed.begun``, going to ``server`` (the item's adapter's pick, recorded in
        the same statement; ``Claimed.server``). The commit does not wait for the disk:
        lost in a crash of the machine or server, the claim and its attempts go together,
        and the message is delivered afresh.
        Claims expired by a dead daemon come back through :meth:`release_expired_claims`.

        Every claim counts a delivery (``message_header.deliveries``); one that ends by
        putting the message back in its queue (:meth:`release`, a parked retry, :meth:`hold`)
        takes it back. A queued message with a count above 0 is a
        *suspect*: a delivery of it never ended (its daemon died, froze past its lease or
        was killed during it). ``Claimed.interrupted`` is that count before the claim. A
        suspect is claimed alone, only when it comes first and ``alone`` (the caller holds
        no other message of ``target``); messages behind it wait until it is done, so that
        one that crashes or freezes its daemon takes no other down with it each time.
        """
        return self.db.hot.claim(target, owner=owner, now=now, lease_seconds=lease_seconds,
                               limit=limit, fifo=fifo, begin=begin, enabled=enabled,
                               held=held, alone=alone, server=server)

    def complete_and_claim(self, completions: list[Completion], *, now: datetime,
                           **claim: Any) -> tuple[list[int], list[Claimed]]:
        """:meth:`complete_many`, then :meth:`claim` (its keyword arguments), in one
        transaction where the database allows (SQLite): a dispatcher's step."""
        return self.db.hot.complete_and_claim(completions, now=now, **claim)

    def claim_next(self, target: str, *, owner: str, now: datetime, lease_seconds: float,
                   fifo: bool = False) -> MessageRow | None:
        """The oldest due message of ``target``, claimed (see :meth:`claim`), taking back
        first the claims of ``target`` whose lease expired; None if there is none."""
        self.release_expired_claims(target, now=now)
        claimed = self.claim(target, owner=owner, now=now, lease_seconds=lease_seconds,
                             fifo=fifo)
        return claimed[0].row if claimed else None

    def release_expired_claims(self, target: str, *, now: datetime, owner: str | None = None,
                               holding: Iterable[int] = (),
                               monotonic: float | None = None) -> int:
        """Put back in their queue the messages of ``target`` whose claim's lease expired
        (their daemon died or was cut off); their open attempts count as outcome unknown.
        Their tokens stay: the old claimer can write nothing more about them. Their count
        of deliveries stays too: those deliveries never ended (see :meth:`claim`).

        Expiry is judged on the database's clock: ``now``, a daemon's ``DatabaseClock`` (the
        server's time carried on the monotonic clock, never this host's wall clock); on
        SQLite, where a daemon that has not yet seen a step of the wall clock would judge
        leases moved across it by another (:mod:`engine.store.clockstep`), the file's clock
        frame read in the same transaction plus this host's ``monotonic`` clock, when given.
        ``owner``: the caller's daemon, whose claims in ``holding`` are never released — a
        daemon knows its own claims are live from its monotonic clock; its expired claims
        that it does not hold (a claim whose commit it never heard of) are."""
        h = message_header.c
        held = sorted(set(holding))
        with self.db.tx() as conn:
            if monotonic is not None and not self.is_postgres:
                zero_at = conn.execute(select(func.max(clock_frame.c.zero_at))).scalar()
                if zero_at is not None:
                    now = as_utc(zero_at) + timedelta(seconds=monotonic)
            expired = select(h.id).where(h.target == target, h.status == Status.DELIVERED,
                                         h.lease_expires_at < now)
            if owner is not None:
                expired = expired.where(or_(h.claimed_by != owner, h.claimed_by.is_(None),
                                            h.id.not_in(held) if held else true()))
            # a row locked is being written by its holder (or by a daemon frozen mid-write,
            # until the server ends its session): the next scan looks again, and this one
            # never waits — waiting, it would hold up the dispatcher and every scan behind it
            expired = expired.with_for_update(skip_locked=True)
            count = conn.execute(update(message_header).where(h.id.in_(expired.scalar_subquery()))
                                 .values(**requeue(delivery_ended=False))).rowcount
        if count:
            self.db.announcer.call_back([Announcement.work(target)])
        return int(count)

    def renew_leases(self, owner: str, *, now: datetime, lease_seconds: float,
                     claims: Iterable[tuple[int, int]] | None = None) -> int:
        """Extend the leases of the claims ``owner`` really holds — ``(message id, token)``
        pairs — and return how many were still its own. A claim orphaned by a write lost in
        a database crash is not among them, so it expires by itself. ``claims=None``:
        every lease ``owner`` holds (tests and tools)."""
        h = message_header.c
        until = now + timedelta(seconds=lease_seconds)
        stmt = update(message_header).where(h.claimed_by == owner, h.status == Status.DELIVERED)
        if claims is None:
            with self.db.tx() as conn:
                return conn.execute(stmt.values(lease_expires_at=until)).rowcount
        pairs = sorted(claims)
        renewed = 0
        with self.db.tx(durable=False) as conn:
            for start in range(0, len(pairs), 500):
                chunk = pairs[start:start + 500]
                renewed += conn.execute(stmt.where(tuple_(h.id, h.claim_token).in_(chunk))
                                        .values(lease_expires_at=until)).rowcount
        return renewed

    def next_due_time(self, target: str) -> datetime | None:
        """When the earliest parked message of ``target`` becomes due (None: none parked)."""
        h = message_header.c
        with self.db.read() as conn:
            value = conn.execute(select(func.min(h.next_attempt_at)).where(
                h.target == target, h.status == Status.QUEUED, h.next_attempt_at.is_not(None))
            ).scalar()
        return as_utc(value)

    # -- attempts ------------------------------------------------------------------------
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
        values: dict[str, Any] = {"ended_at": ended_at, "outcome": outcome,
                                  "server": storable(server), "status_code": status_code,
                                  "error_text": storable(error_text)}
        if started_at is not None:
            values["started_at"] = started_at
        stmt = _fenced_attempt(attempt_id, token)
        def write(conn: Connection) -> None:
            changed = conn.execute(stmt.values(**values)).rowcount
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

    # -- outcomes ------------------------------------------------------------------------
    def schedule_retry(self, message_id: int, *, next_attempt_at: datetime, release: bool,
                       token: int | None = None) -> None:
        """Persist the retry-needed flag and the next attempt time. ``release`` parks the
        message back in the queue (requeue mode, or a stop during a blocking wait).
        ``token``: raises ClaimLost when the claim is no longer that one."""
        values: dict[str, Any] = {"retry_needed": True, "next_attempt_at": next_attempt_at}
        if release:
            values.update(requeue())
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
        values: dict[str, Any] = {**requeue(), "next_attempt_at": until}
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

    def release_claim(self, message_id: int, owner: str, token: int | None = None) -> bool:
        """Put ``message_id`` back in its queue if ``owner`` still holds its claim (with
        ``token``, when given: that very claim) — a worker lost track of it through a
        database error; True if it did. That delivery did not end normally: it stays
        counted (see :meth:`claim`), so a message that breaks every delivery of it is not
        passed around for ever either."""
        h = message_header.c
        with self.db.tx() as conn:
            target = conn.execute(fenced_update(message_id, token)
                                  .where(h.status == Status.DELIVERED, h.claimed_by == owner)
                                  .values(**requeue(delivery_ended=False))
                                  .returning(h.target)).scalar()
            if target is not None:
                self.db.announcer.notify(conn, [Announcement.work(target)])
        if target is not None:
            self.db.announcer.call_back([Announcement.work(target)])
        return target is not None

    def complete(self, request: MessageRow, *, response_class: str | None,
                 response_body: str | None, now: datetime,
                 attempt: AttemptEnd | None = None, fenced: bool = False) -> int | None:
        """Mark ``request`` ``Completed``, end its last ``attempt`` (outcome ok) and store its
        response, if any, linked both ways — in one transaction. Not durable on its own: lost
        in a server crash, the attempt looks unfinished (outcome unknown). ``fenced``: only
        if the claim is still ``request.claim_token`` (else ClaimLost, nothing written)."""
        h = message_header.c
        token = request.claim_token if fenced else None
        with self.db.tx(durable=False, changes=True) as conn:
            if attempt is not None:
                conn.execute(update(message_attempt)
                             .where(message_attempt.c.id == attempt.attempt_id)
                             .values(ended_at=attempt.ended_at, outcome="ok",
                                     server=attempt.server))
            response_id = None
            if response_body is not None:
                response_id = conn.execute(message_header.insert().values(
                    session_id=request.session_id, source=request.target,
                    target=request.source or "", kind="response", body_class=response_class,
                    body=response_body, status=Status.COMPLETED, is_error=False, time_created=now,
                    time_processed=now, time_completed=now, corresponding_id=request.id,
                    retry_needed=False, attempts=0).returning(h.id)).scalar_one()
            waited = conn.execute(fenced_update(request.id, token).values(
                status=Status.COMPLETED, is_error=False, retry_needed=False, next_attempt_at=None,
                time_completed=now, corresponding_id=response_id, claimed_by=None,
                lease_expires_at=None).returning(h.waited)).scalar()
            check_claim(0 if waited is None else 1, request.id, token)  # rolls all back
            if waited:
                self.db.announcer.notify(conn, done_announcements([request.id]))
        if waited:
            self.db.announce_done([request.id])
        return response_id

    def complete_many(self, completions: list[Completion], *, now: datetime,
                      durable: bool = False) -> list[int]:
        """Record successful attempts in one transaction (a group commit): each message
        ``Completed``, its attempt ended (outcome ok, true start and end) and its response
        stored, linked both ways — only where the claim is still the completion's token.
        Returns the ids completed; the others' claims were lost and nothing was written
        for them. Not durable on its own (see :meth:`complete`) unless ``durable``."""
        return (self.db.hot.complete_many(completions, now=now, durable=durable)
                if completions else [])

    def mark_waited(self, message_id: int) -> MessageRow | None:
        """Flag ``message_id`` as waited for — its end will be announced to every process —
        and return it as it is now (None: no such message). A waiter registers with
        :attr:`completions` first, then calls this: an end committed before the flag is
        seen in the row returned, one committed after it is announced."""
        h = message_header.c
        news: list[Announcement] = []
        with self.db.tx(durable=False) as conn:
            row = conn.execute(update(message_header).where(h.id == message_id)
                               .values(waited=True).returning(*message_header.c)
                               ).mappings().first()
            if row is not None and row["status"] == Status.QUEUED:
                # someone waits for it now: a daemon lingering before its next claim (it
                # claims a few at a time when messages arrive one by one) claims it at once
                news = [Announcement.work(row["target"], urgent=True)]
                self.db.announcer.notify(conn, news)
        self.db.announcer.call_back(news)
        return MessageRow.from_mapping(row) if row else None

    def finish(self, message_id: int, *, status: str, error_text: str, now: datetime,
               token: int | None = None) -> None:
        """End a message in ``Error``, ``Suspended``, ``Discarded`` or ``Aborted``.
        ``token``: only if the claim is still that one (else ClaimLost)."""
        self._update(message_id, token=token, ends=True, status=status,
                     is_error=status == Status.ERROR, error_text=storable(error_text),
                     retry_needed=False,
                     next_attempt_at=None, time_completed=now, claimed_by=None,
                     lease_expires_at=None)

    def get_message(self, message_id: int) -> MessageRow | None:
        return self.db.hot.message(message_id)

    def get_outcome(self, message_id: int) -> Outcome | None:
        """``message_id`` as it is now and its response's body, in one read."""
        return self.db.hot.outcome(message_id)

    # -- items and daemons ---------------------------------------------------------------
    def set_item_enabled(self, name: str, enabled: bool, *, reason: str | None,
                         now: datetime) -> None:
        """Override the production file's ``enabled`` for item ``name``, and tell the
        daemons at once (a disable holds from their next message, see
        :meth:`~engine.store.notify.Announcement.switch`)."""
        news = [Announcement.switch(name, enabled)]
        with self.db.tx() as conn:
            conn.execute(item_state.delete().where(item_state.c.config_name == name))
            conn.execute(item_state.insert().values(config_name=name, enabled=enabled,
                                                    reason=reason, updated_at=now))
            self.db.announcer.notify(conn, news)
        self.db.announcer.call_back(news)

    def item_overrides(self) -> dict[str, bool]:
        """Items whose enabled state an operator (or action D) has set."""
        with self.db.read() as conn:
            rows = conn.execute(select(item_state.c.config_name, item_state.c.enabled)).all()
        return {name: bool(enabled) for name, enabled in rows}

    def register_daemon(self, daemon_id: str, *, host: str, pid: int, production: str,
                        items: str, now: datetime, pid_namespace: str | None = None,
                        process_start: int | None = None) -> None:
        """Add ``daemon_id`` to the ``daemon`` table, started and alive at ``now``;
        ``process_start``: its process's start time in clock ticks after the boot (None:
        unknown, its PID alone is judged)."""
        with self.db.tx() as conn:
            conn.execute(daemon.insert().values(id=daemon_id, host=host, pid=pid,
                                                production=production, started_at=now,
                                                heartbeat_at=now, items=items,
                                                pid_namespace=pid_namespace,
                                                process_start=process_start))

    def stale_daemons(self, before: datetime) -> list[str]:
        """Ids of the daemons whose last heartbeat is older than ``before``."""
        with self.db.read() as conn:
            return list(conn.execute(select(daemon.c.id).where(daemon.c.heartbeat_at < before))
                        .scalars())

    def heartbeat(self, daemon_id: str, *, now: datetime, lease_seconds: float,
                  claims: Iterable[tuple[int, int]] | None = None) -> None:
        """Mark ``daemon_id`` alive and extend the leases of the ``claims`` it really holds
        (see :meth:`renew_leases`)."""
        with self.db.tx() as conn:
            conn.execute(update(daemon).where(daemon.c.id == daemon_id)
                         .values(heartbeat_at=now))
        self.renew_leases(daemon_id, now=now, lease_seconds=lease_seconds, claims=claims)

    def release_claims(self, owner: str) -> int:
        """Put every message ``owner`` holds back in its queue (its daemon stopped or died).
        Attempts left open stay open: the next delivery treats them as outcome unknown, and
        the deliveries stay counted: they never ended (see :meth:`claim`)."""
        h = message_header.c
        with self.db.tx() as conn:
            targets = list(conn.execute(update(message_header)
                                        .where(h.claimed_by == owner, h.status == Status.DELIVERED)
                                        .values(**requeue(delivery_ended=False))
                                        .returning(h.target)).scalars())
            news = work_announcements(targets)
            self.db.announcer.notify(conn, news)
        self.db.announcer.call_back(news)
        return len(targets)

    def local_daemons(self, host: str, *, namespace: str) -> list[tuple[str, int, int | None]]:
        """(id, pid, process start) of the daemons registered from ``host`` in PID
        namespace ``namespace``."""
        d = daemon.c
        with self.db.read() as conn:
            return [(r.id, r.pid, r.process_start) for r in conn.execute(
                select(d.id, d.pid, d.process_start)
                .where(d.host == host, d.pid_namespace == namespace))]

    def unregister_daemon(self, daemon_id: str) -> bool:
        """Take ``daemon_id`` off the ``daemon`` table; False if it was not on it (another
        daemon forgot it first)."""
        with self.db.tx() as conn:
            return bool(conn.execute(daemon.delete().where(daemon.c.id == daemon_id))
                        .rowcount)

    # -- announcements -------------------------------------------------------------------
    def add_queue_callback(self, callback: AnnouncementCallback) -> None:
        """Call ``callback(announcement)`` after this process commits something announced
        (:class:`~engine.store.notify.Announcement`), and — once :meth:`hear_other_processes`
        was called — when another process does."""
        self.db.announcer.add_callback(callback)

    def remove_queue_callback(self, callback: AnnouncementCallback) -> None:
        self.db.announcer.remove_callback(callback)

    def add_reconnect_hook(self, hook: Callable[[], object]) -> None:
        """Call ``hook()`` whenever the listener (re)connects: what other processes
        announced meanwhile was lost, so whoever waits should look again."""
        self._reconnect_hooks.append(hook)

    def remove_reconnect_hook(self, hook: Callable[[], object]) -> None:
        if hook in self._reconnect_hooks:
            self._reconnect_hooks.remove(hook)

    def hear_other_processes(self) -> None:
        """Hear what other processes announce, from now on (on return the listener is in
        place: LISTEN on PostgreSQL, this process's doorbell on an SQLite file), until as
        many :meth:`stop_hearing` calls or :meth:`dispose`. An in-memory database has no
        other process."""
        with self._hearing_lock:
            self._hearers += 1
            if self.is_postgres:
                if self._listener is None:
                    self._listener = QueueListener(
                        self.engine, lambda note: self.db.announcer.deliver([note]),
                        on_reconnect=self._reconnected)
                    self._listener.start()
                listener = self._listener
            else:
                doorbell = self.db.doorbell
                if doorbell is not None and not doorbell.listening:
                    doorbell.listen(lambda note: self.db.announcer.deliver([note]))
                return
        listener.connected.wait(LISTEN_WAIT)  # else the safety nets cover the first notes

    def stop_hearing(self) -> None:
        """Undo one :meth:`hear_other_processes`; the last one stops the listener."""
        with self._hearing_lock:
            self._hearers = max(self._hearers - 1, 0)
            if self._hearers:
                return
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        if self.db.doorbell is not None:
            self.db.doorbell.close()

    def _reconnected(self) -> None:
        for hook in list(self._reconnect_hooks):
            try:
                hook()
            except Exception:  # one hook must not starve the others
                log.exception("reconnect hook failed")

    def announce(self, targets: Iterable[str]) -> None:
        """Tell idle workers — of this process, and of every daemon — that ``targets`` may
        have work (e.g. a FIFO item whose lease was just given up)."""
        self.db.announce(work_announcements(targets))

    # -- helpers -------------------------------------------------------------------------
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

    def read(self) -> Transaction:
        """A read-only connection (see :meth:`Database.read`), for callers that read tables
        the store has no method for."""
        return self.db.read()


def _fenced_attempt(attempt_id: int, token: int | None) -> Any:
    """An UPDATE of attempt ``attempt_id``, only while its message's claim is ``token``
    (when given)."""
    a, h = message_attempt.c, message_header.c
    stmt = update(message_attempt).where(a.id == attempt_id)
    if token is not None:
        stmt = stmt.where(select(h.id).where(h.id == a.message_id, h.claim_token == token)
                          .exists())
    return stmt


# ``deliveries`` of a message put back in its queue by the delivery that claimed it: that
# delivery ended, so it no longer counts (the claim counted it; see SqlStore.claim).
_DELIVERY_ENDED = case((message_header.c.deliveries > 0, message_header.c.deliveries - 1),
                       else_=0)


def requeue(*, delivery_ended: bool = True) -> dict[str, Any]:
    """The values of a claimed message put back in its queue: ``Queued``, claimed by nobody,
    no lease. ``delivery_ended``: the delivery that claimed it gave it back, so that delivery
    no longer counts (``deliveries`` one less); False when it never ended (its daemon died,
    or lost track of it), which keeps it counted (see :meth:`SqlStore.claim`)."""
    values: dict[str, Any] = {"status": Status.QUEUED, "claimed_by": None,
                              "lease_expires_at": None}
    if delivery_ended:
        values["deliveries"] = _DELIVERY_ENDED
    return values
