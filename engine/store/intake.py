"""A store's intake: new messages committed (alone, in groups, or claimed as they are
accepted by an item of this process: a *direct take*) and the flag of a message someone
waits for."""
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
