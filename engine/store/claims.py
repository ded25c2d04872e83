"""A store's claims: messages taken from their queue under a lease and a fencing token, the
leases renewed with each daemon's heartbeat, and the claims given back (expired, lost, or
those of a daemon that stopped)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, true, tuple_, update

from engine.clock import as_utc
from engine.store.connector import Database, fenced_update, work_announcements
from engine.store.hotpath import Claimed, Completion
from engine.store.models import clock_frame, daemon, message_header
from engine.store.notify import Announcement
from engine.store.statuses import Status
from engine.store.transitions import requeue


class StoreClaims:
    """The claim methods of :class:`~engine.store.sql.SqlStore`."""

    db: Database
    is_postgres: bool

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
