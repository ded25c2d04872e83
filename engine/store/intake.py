"""A store's intake: new messages committed alone, in groups, or claimed as accepted (a
*direct take*), and the flag of a message someone waits for."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import update

from engine.clock import utcnow
from engine.store.connector import Database
from engine.store.group import GroupCommit, commit_together
from engine.store.hotpath import Accepted, Intake, Taker
from engine.store.models import message_header
from engine.store.notify import Announcement
from engine.store.rows import MessageRow
from engine.store.statuses import Status


class StoreIntake:
    """The intake methods of :class:`~engine.store.sql.SqlStore`."""

    db: Database
    takers: dict[str, Taker]
    intake: GroupCommit[Intake, Accepted]

    def enqueue(self, *, target: str, body_class: str | None, body: str, source: str | None = None,
                session_id: int | None = None, now: datetime | None = None) -> int:
        """Commit a new request for ``target`` durably and return its id (a new session
        unless ``session_id``)."""
        return self.accept(target=target, body_class=body_class, body=body, source=source,
                           session_id=session_id, now=now).id

    def accept(self, *, target: str, body_class: str | None, body: str,
               source: str | None = None, session_id: int | None = None,
               now: datetime | None = None, idempotency_key: str | None = None,
               trace_context: str | None = None, waited: bool = False,
               durable: bool = True, search_paths: Sequence[str] = ()) -> Accepted:
        """:meth:`enqueue`, returning :class:`Accepted`. ``idempotency_key``: an existing
        message of ``target`` with that key is returned instead (``created`` False).
        ``waited``: the caller will wait for it (urgent work). ``durable=False``: only for a
        message whose loss in a crash is recovered otherwise. ``search_paths``: the target's
        search properties."""
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
        """:meth:`accept` of ``intakes`` in one durable transaction; per intake an Accepted
        or its own error (a failed batch is retried one by one)."""
        results = commit_together(intakes, self._accept_one, self.db.hot.accept_many)
        work: dict[str, bool] = {}  # target → urgent
        for intake, result in zip(intakes, results):
            if isinstance(result, Accepted):
                if result.created:
                    work[intake.target] = work.get(intake.target, False) or intake.waited
                elif intake.waited:
                    self.mark_waited(result.id)
        if work:
            self.db.announcer.call_back([Announcement.work(target, urgent=urgent)
                                         for target, urgent in work.items()])
        return results

    def add_taker(self, target: str, taker: Taker) -> bool:
        """Let ``taker`` take ``target``'s waited-for messages as accepted here; False
        where the driver cannot."""
        if not self.db.hot.direct_takes:
            return False
        self.takers[target] = taker
        return True

    def remove_taker(self, target: str, taker: Taker) -> None:
        """Undo :meth:`add_taker`."""
        if self.takers.get(target) is taker:
            del self.takers[target]

    def _take_directly(self, taker: Taker, target: str, body_class: str | None, body: str,
                       source: str | None, session_id: int | None, now: datetime,
                       idempotency_key: str | None, trace_context: str | None,
                       durable: bool) -> Accepted | None:
        """Claim a waited-for message in the transaction that accepts it and hand it to a
        free worker (docs/waiting.md). None: no worker free."""
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
        if not accepted.created:  # someone waits for the key's earlier message now
            self.mark_waited(accepted.id)
        else:  # switched off, or FIFO with a message ahead
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
        """Commit requests for ``target`` (``(body_class, body)`` pairs) in one durable
        transaction; their ids in order."""
        if not bodies:
            return []
        ids = self.db.hot.enqueue_many(target, bodies, source=source, session_id=session_id,
                                     now=now or utcnow(), trace_context=trace_context,
                                     search_paths=search_paths)
        self.db.announcer.call_back([Announcement.work(target)])
        return ids

    def mark_waited(self, message_id: int) -> MessageRow | None:
        """Flag ``message_id`` as waited for and return it as it is now (None: none). A
        waiter registers first: an earlier end shows in the row, a later one is announced."""
        h = message_header.c
        news: list[Announcement] = []
        with self.db.tx(durable=False) as conn:
            row = conn.execute(update(message_header).where(h.id == message_id)
                               .values(waited=True).returning(*message_header.c)
                               ).mappings().first()
            if row is not None and row["status"] == Status.QUEUED:
                # a daemon lingering before its next claim claims it at once
                news = [Announcement.work(row["target"], urgent=True)]
                self.db.announcer.notify(conn, news)
        self.db.announcer.call_back(news)
        return MessageRow.from_mapping(row) if row else None
