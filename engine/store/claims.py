"""A store's claims: messages taken under a lease and a fencing token, leases renewed with
each heartbeat, and claims given back (expired, lost, or of a stopped daemon)."""
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
        """Take up to ``limit`` due messages of ``target`` in one statement, oldest first,
        leased to ``owner`` with a new fencing token each; nothing while the item is switched
        off (by an operator, else by ``enabled``).

        ``fifo``: only the head of the queue, past the ids in ``held``. ``begin``: begin
        attempt 1 with the claim, going to ``server``. ``alone``: the caller holds no other
        message of ``target``, so it may take a *suspect* — a message a delivery of which
        never ended (``deliveries`` above 0) — which is claimed alone and first
        (docs/architecture.md)."""
        return self.db.hot.claim(target, owner=owner, now=now, lease_seconds=lease_seconds,
                               limit=limit, fifo=fifo, begin=begin, enabled=enabled,
                               held=held, alone=alone, server=server)

    def complete_and_claim(self, completions: list[Completion], *, now: datetime,
                           **claim: Any) -> tuple[list[int], list[Claimed]]:
        """:meth:`complete_many`, then :meth:`claim`, in one transaction where possible."""
        return self.db.hot.complete_and_claim(completions, now=now, **claim)

    def release_expired_claims(self, target: str, *, now: datetime, owner: str | None = None,
                               holding: Iterable[int] = (),
                               monotonic: float | None = None) -> int:
        """Put back the messages of ``target`` whose lease expired; their tokens and
        delivery counts stay. Returns how many.

        Expiry is judged on the database's clock ``now``; on SQLite, with ``monotonic``, on
        the file's clock frame plus it (:mod:`engine.store.clockstep`). ``owner``'s claims
        in ``holding`` are never released: it knows they are live."""
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
            # a locked row is being written by its holder: never wait, the next scan looks again
            expired = expired.with_for_update(skip_locked=True)
            count = conn.execute(update(message_header).where(h.id.in_(expired.scalar_subquery()))
                                 .values(**requeue())).rowcount
        if count:
            self.db.announcer.call_back([Announcement.work(target)])
        return int(count)

    def renew_leases(self, owner: str, *, now: datetime, lease_seconds: float,
                     claims: Iterable[tuple[int, int]] | None = None) -> int:
        """Extend the leases of the ``(message id, token)`` claims ``owner`` still holds
        (None: all of its leases); returns how many."""
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
        """Mark ``daemon_id`` alive and renew its ``claims`` (:meth:`renew_leases`)."""
        with self.db.tx() as conn:
            conn.execute(update(daemon).where(daemon.c.id == daemon_id)
                         .values(heartbeat_at=now))
        self.renew_leases(daemon_id, now=now, lease_seconds=lease_seconds, claims=claims)

    def release_claims(self, owner: str) -> int:
        """Put every message ``owner`` holds back in its queue; attempts and deliveries stay
        open (outcome unknown)."""
        h = message_header.c
        with self.db.tx() as conn:
            targets = list(conn.execute(update(message_header)
                                        .where(h.claimed_by == owner, h.status == Status.DELIVERED)
                                        .values(**requeue())
                                        .returning(h.target)).scalars())
            news = work_announcements(targets)
            self.db.announcer.notify(conn, news)
        self.db.announcer.call_back(news)
        return len(targets)

    def release_claim(self, message_id: int, owner: str, token: int | None = None) -> bool:
        """Put ``message_id`` back in its queue if ``owner`` (and ``token``, if given) still
        holds its claim; True if it did. The delivery stays counted."""
        h = message_header.c
        with self.db.tx() as conn:
            target = conn.execute(fenced_update(message_id, token)
                                  .where(h.status == Status.DELIVERED, h.claimed_by == owner)
                                  .values(**requeue())
                                  .returning(h.target)).scalar()
            if target is not None:
                self.db.announcer.notify(conn, [Announcement.work(target)])
        if target is not None:
            self.db.announcer.call_back([Announcement.work(target)])
        return target is not None
