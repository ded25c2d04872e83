"""The dispatcher of one item: batch claims in, group-committed successes out.

One thread per item talks to the queue, so idle workers never poll the database
(docs/architecture.md, "Throughput"):

- it claims as many due messages as there are idle workers in one statement — a batch for a
  ``pool_size = 1`` item, sized so that a batch is about :data:`BATCH_WINDOW` of work, and
  claimed once half of the previous one is done, so that the claim's time in the database
  overlaps the worker's and the worker never waits — and hands them to the item's workers
  through an in-memory queue, in chunks of about :data:`CHUNK_WORK` of one worker's work (a
  fast item's workers then take many messages per hand-off instead of waking, and contending
  for the interpreter, once per message; a slow item's chunks are one message each);
- for idempotent items the claim also begins each fresh message's attempt 1 (a crash turns
  the batch into outcome-unknown attempts, which they re-send); non-idempotent items begin
  every attempt durably, one by one, just before its request is sent (the worker does);
- the workers hand it their successes (:meth:`Dispatcher.defer`), which it writes in one
  transaction before its next claim, or after :data:`FLUSH_WINDOW` at the latest, so a FIFO
  head is never left looking Delivered — except that on a server database the workers of a
  pool commit their chunks' successes themselves (:class:`OwnCommits`), side by side;
- it knows the next due time of the item's parked messages and sleeps until then, the
  poll interval, or a wake-up (new work announced, a worker free, an operator's switch).

It keeps the claims the item really holds in its :class:`~engine.delivery.claims.ClaimBook`,
whose claims the heartbeat renews, and takes back claims whose lease expired (a dead daemon's)
every :data:`EXPIRY_SCAN` seconds.

A *suspect* — a message one of whose deliveries never ended (its daemon died, froze past its
lease or was killed during it: docs/architecture.md, "Poison messages") — is claimed only when the
item holds nothing else here, and while it is delivered nothing more is claimed: if it
crashes or freezes the daemon again, no other message of the item is caught with it and
counted against (:meth:`~engine.store.sql.SqlStore.claim`).
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from engine.clock import Clock
from engine.delivery.claims import ClaimBook
from engine.errors import EncoreError
from engine.store.hotpath import Claimed, Completion, Grant
from engine.store.sql import SqlStore

log = logging.getLogger(__name__)

BATCH_WINDOW = 0.05  # seconds of work a pool_size = 1 item claims at once
MAX_BATCH = 100  # messages one claim takes at most
FIRST_BATCH = 4  # a pool_size = 1 item's first claim, before it knows how long work takes
FLUSH_WINDOW = 0.02  # seconds a success may wait for the group commit
# seconds a dispatcher waits, after a claim that emptied the queue, before it claims again:
# messages arriving one by one are then claimed a few at a time instead of one transaction
# each (the first message after a quiet spell is claimed at once)
CLAIM_LINGER = 0.005
# seconds of one worker's work handed over at once: a chunk of a fast item's claim goes to
# one worker, which gives back what is left of it to the others after a message that took
# longer than CHUNK_GIVE_BACK (one much slower than the item's usual holds the rest no longer)
CHUNK_WORK = 0.005
CHUNK_GIVE_BACK = 2 * CHUNK_WORK
# how fast one worker alone does a message is the fastest recent delivery (waits for the
# interpreter while other workers run only ever add to a delivery's time); the figure rises
# by this factor per delivery, so a service that slows down is followed within ~100
FASTEST_DRIFT = 1.05
MAX_PENDING = 500  # successes that force a group commit
EXPIRY_SCAN = 1.0  # seconds between looks for claims whose lease expired
STORE_RETRY_DELAY = 1.0  # seconds the dispatcher and the workers wait after a database error


@dataclass(frozen=True, kw_only=True)
class DispatchSettings:
    """What a dispatcher needs to know of its item and daemon."""

    target: str
    owner: str
    pool_size: int
    fifo: bool  # claim only the head of the queue, in order
    begin: bool  # begin attempt 1 with the claim (idempotent items)
    enabled: bool  # the production file's switch (an operator's overrides it)
    lease_seconds: float
    poll_interval: float


class Dispatcher:
    """Feeds one item's workers (see the module docstring). ``ready()`` is asked before each
    claim: False while the adapter cannot start, the schedule window is closed or another
    daemon holds the FIFO item's lease. :attr:`book`: the claims the item holds, which its
    workers check before they send."""

    def __init__(self, settings: DispatchSettings, *, store: SqlStore, clock: Clock,
                 ready: Callable[[], bool], stop: threading.Event) -> None:
        self.settings = settings
        self.book = ClaimBook(store, clock, target=settings.target, owner=settings.owner,
                              lease_seconds=settings.lease_seconds)
        self.store = store
        self.clock = clock
        self.ready = ready
        self.stop = stop
        self.wakeup = threading.Event()
        # (claim number, messages in delivery order) for the workers; None tells one to stop
        self.work: queue.SimpleQueue[tuple[int, tuple[Claimed, ...]] | None] = \
            queue.SimpleQueue()
        self.claims = 0  # claim statements that returned messages, so far
        self.held_back = threading.Event()  # an operator switched the item off
        self._lock = threading.Lock()
        self._outstanding = 0  # claims handed to workers and not finished
        self._kept = 0  # successes finished and waiting for their worker's own commit
        self._suspect: int | None = None  # a suspect being delivered: claim nothing more
        self._looked_alone = True  # the last claim was made with nothing in hand
        self._pending: list[Completion] = []
        self._pending_ids: set[int] = set()
        self._oldest_pending = 0.0  # monotonic seconds
        self._seconds_per_message = BATCH_WINDOW / FIRST_BATCH
        self._fastest = BATCH_WINDOW / FIRST_BATCH  # seconds: see FASTEST_DRIFT
        self._refill_at = 1  # pool_size = 1: claim again when this many are left to work
        self._next_expiry_scan = 0.0
        # seconds to wait after a claim that emptied the queue (0: a ticked dispatcher, whose
        # caller chooses the times: on a virtual clock a linger would only shift them)
        self.linger = CLAIM_LINGER
        # pool_size > 1: claim batches sized by the pool's recent speed (False: one message
        # per idle worker, as a ticked dispatcher on a virtual clock does)
        self.batched = True
        # a success someone waits for is committed on its worker's thread (False: a ticked
        # dispatcher, which commits each at its own step of the virtual clock)
        self.urgent_here = True
        # direct takes (:meth:`reserve`): None, none; else asked before each, as ``ready``
        # is before a claim (set by the item, which knows its guards, window and lease)
        self.direct: Callable[[], bool] | None = None
        # the server an attempt begun with a claim goes to, recorded with it (the item's
        # adapter's pick; set by the item, which knows its adapter)
        self.server: Callable[[], str | None] = lambda: None
        self._closed = False  # the workers were told to stop: no direct take any more
        self._linger_until = 0.0  # monotonic seconds
        # True while only new work can end the dispatcher's wait: set before a claim looks
        # at the queue, so that a message committed after the claim's look always wakes it;
        # False while a worker's finish or a timer will wake it anyway
        self.awaits_work = True
        self._thread: threading.Thread | None = None

    # -- what workers call ---------------------------------------------------------------
    def defer(self, completion: Completion) -> None:
        """Record a success with the next group commit (the worker goes on meanwhile). One
        that someone waits for (``urgent``) is committed at once, on the worker's thread
        (``urgent_here``; a waiter should not wait for the dispatcher to wake), else — a
        ticked dispatcher, or that commit failed — at the dispatcher's next step."""
        if completion.urgent and self.urgent_here:
            try:
                done = self.store.complete_many([completion], now=self.clock.now())
            except EncoreError as exc:
                log.warning("item %s: the success of message %d is recorded with the next "
                            "group commit: %s", self.settings.target, completion.message_id,
                            exc)
            else:
                self._committed([completion], done)
                return
        with self._lock:
            if not self._pending or completion.urgent:
                self._oldest_pending = (self.clock.monotonic() - FLUSH_WINDOW
                                        if completion.urgent else self.clock.monotonic())
            self._pending.append(completion)
            self._pending_ids.add(completion.message_id)
            full = len(self._pending) >= MAX_PENDING
        if full or completion.urgent:
            self.wakeup.set()

    def commit_now(self, completion: Completion) -> None:
        """Commit one success before returning, on the caller's thread — a FIFO item's: its
        next message is not sent before the end of this one is written (on a server
        database, durably: a crash or failover of the server must not lose it either), or
        the message would be sent again after the next. If the database refuses it, the
        success waits for the group commit, which tries again, and the caller with it (a
        ticked dispatcher, which only the caller's thread drives, takes it at its step)."""
        try:
            done = self.store.complete_many([completion], now=self.clock.now(),
                                            durable=self.store.is_postgres)
        except EncoreError as exc:
            log.warning("item %s: the success of message %d waits for the group commit: %s",
                        self.settings.target, completion.message_id, exc)
        else:
            self._committed([completion], done)
            return
        self.defer(completion)
        self.wakeup.set()
        while self.urgent_here and not self._closed and completion.message_id in self.book.ids():
            self.clock.sleep(FLUSH_WINDOW)  # the claim book lets it go once it is written

    def finished(self, message_id: int, seconds: float, *, ended: bool = False,
                 kept: bool = False) -> None:
        """A worker is done with ``message_id`` (after ``seconds`` of work). ``ended``: the
        worker committed the message's end itself (Completed, Error, Suspended), so the
        queue is as it was. ``kept``: its success waits for the worker's own commit
        (:class:`OwnCommits`): the claim is held until then, and a stop waits for it, but
        the dispatcher has nothing to commit for it."""
        with self._lock:
            self._outstanding -= 1
            suspect = message_id == self._suspect
            if suspect:
                self._suspect = None
            # a success that waits for a commit is held until then
            pending = message_id in self._pending_ids
            self.book.let_go(message_id, pending=pending or kept)
            if kept:
                self._kept += 1
                ended = True
            self._seconds_per_message += (seconds - self._seconds_per_message) * 0.2
            self._fastest = min(self._fastest * FASTEST_DRIFT, seconds)
            again_at = (self._pool_batch()[1] if self.settings.pool_size > 1
                        else self._refill_at)
            idle = self._outstanding <= again_at
            # Waiting for new work (its last look found nothing to claim), it would only
            # look again and find nothing: what ended here added nothing to the queue, and
            # new work wakes it. Not woken, it leaves the interpreter to whoever waited for
            # this message. Woken still: a FIFO item's next message, a suspect's release, a
            # success left for the group commit, a message back in the queue, and the last
            # message in hand when the last look was made with others in hand (a suspect,
            # claimed only by an item that holds nothing else, may be waiting for that).
            quiet = (ended and self.awaits_work and not pending and not suspect
                     and not self.settings.fifo
                     and (self._outstanding > 0 or self._looked_alone))
        if idle and not quiet:
            self.wakeup.set()

    # -- direct takes (what SqlStore.accept calls; docs/waiting.md) ------------------------
    def reserve(self) -> Grant | None:
        """A worker free now for a waited-for message the intake will claim as it accepts
        it, counted as handed out until :meth:`take` or :meth:`release`; None — stopping,
        switched off, a suspect in hand, no worker free, a FIFO item with anything in hand,
        or ``direct`` says no (guards, a schedule window, an adapter not started, the FIFO
        lease elsewhere) — and the message is queued and claimed as usual."""
        s = self.settings
        with self._lock:
            if (self._closed or self.stop.is_set() or self.held_back.is_set()
                    or self._suspect is not None or self.direct is None):
                return None
            if s.fifo and (self._outstanding or self.book.ids()):
                return None
            if self._outstanding >= s.pool_size:
                return None
            self._outstanding += 1
        if not self.direct():
            self.release()
            return None
        return Grant(owner=s.owner, lease_seconds=s.lease_seconds, begin=s.begin,
                     fifo=s.fifo, enabled=s.enabled, server=self.server() if s.begin else None)

    def take(self, claimed: Claimed) -> None:
        """The reserved worker's message, claimed by its intake: booked as any claim's and
        handed to the workers. After the stop it goes back to the queue unsent."""
        with self._lock:
            if not self._closed:
                self.book.took([claimed], self.clock.monotonic())
                self.claims += 1
                self.work.put((self.claims, (claimed,)))
                # the queue had nothing for it: linger, as after a claim that ran dry,
                # rather than claim again the moment this one is done
                self._linger_until = self.clock.monotonic() + self.linger
                return
            self._outstanding -= 1
        row = claimed.row
        try:
            self.store.hold(row.id, token=row.claim_token, until=self.clock.now(),
                            begun=claimed.begun)
        except EncoreError as exc:  # its lease ends, and another claim takes it
            log.warning("item %s: message %d, taken at the stop, is left to its lease: %s",
                        self.settings.target, row.id, exc)

    def release(self) -> None:
        """Undo :meth:`reserve`: the message was not claimed for the worker."""
        with self._lock:
            self._outstanding -= 1
        self.wakeup.set()

    def announce(self, *, urgent: bool = False) -> None:
        """New work was committed for the item: wake the dispatcher if it is waiting for
        work (not when it is busy or lingering: it claims again soon without being told).
        ``urgent``: someone waits for it — a lingering dispatcher claims it at once."""
        if urgent:
            with self._lock:
                self._linger_until = 0.0
            self.wakeup.set()
        elif self.awaits_work:
            self.wakeup.set()

    def switch(self, enabled: bool) -> None:
        """An operator (or reply code action D) switched the item on or off: off holds at
        once, also the messages already claimed and not yet begun."""
        if enabled:
            self.held_back.clear()
        else:
            self.held_back.set()
        self.wakeup.set()

    # -- the thread ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"{self.settings.target}-dispatcher")
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Wait for the dispatcher's last group commit; True if it ended in time."""
        self.wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _run(self) -> None:
        while not self.stop.is_set():
            self.wakeup.clear()  # before the step: a wake-up during it is not lost
            try:
                wait = self.tick()
            except EncoreError as exc:
                log.error("item %s: %s; trying again in %.0f s", self.settings.target, exc,
                          STORE_RETRY_DELAY)
                wait = STORE_RETRY_DELAY
            except Exception:  # the dispatcher must outlive one bad step
                log.exception("item %s: unexpected error in the dispatcher",
                              self.settings.target)
                wait = STORE_RETRY_DELAY
            self.wakeup.wait(wait)
        with self._lock:  # no direct take after the workers' stop
            self._closed = True
            for _ in range(self.settings.pool_size):
                self.work.put(None)  # after what is queued: workers put those back, then stop
        self._drain()

    def _drain(self) -> None:
        """After a stop: group-commit the successes of the workers as they finish."""
        while True:
            with self._lock:
                busy = self._outstanding > 0 or self._kept > 0
            self._flush_quietly()
            if not busy:
                return
            self.wakeup.clear()
            self.wakeup.wait(FLUSH_WINDOW)

    def tick(self) -> float:
        """One step: commit due successes, take back expired claims, claim for idle workers.
        Returns the seconds to wait before the next step (a wake-up comes sooner)."""
        now = self.clock.monotonic()
        if now >= self._next_expiry_scan:
            self._next_expiry_scan = now + EXPIRY_SCAN
            self.store.release_expired_claims(self.settings.target, now=self.clock.now(),
                                              owner=self.settings.owner,
                                              holding=self.book.ids(),
                                              monotonic=self.clock.monotonic())
        if self.held_back.is_set():
            self._look_at_switch()
        wait = self.settings.poll_interval
        # not waiting for work until the claim looks: a worker that finishes from here on
        # wakes it (finished() leaves a dispatcher that waits for work asleep)
        self.awaits_work = False
        slots = self._free_slots()
        if slots and not self.held_back.is_set() and self.ready():
            self.awaits_work = True
            claimed = self._claim(slots)  # with the pending successes, in one step
            if claimed == slots and self._free_slots():
                return 0.0  # workers finished meanwhile and the queue may hold more
            if claimed:  # a worker's finish or the linger's end wakes it
                self.awaits_work = False
            else:
                wait = self._idle_wait()
        else:
            # busy (a worker's finish wakes it), lingering (its timer does), held back or
            # not ready (the switch or the poll interval does): new work changes nothing
            if self._flush_wait(wait) == 0.0:
                self.flush()
        with self._lock:
            linger = self._linger_until - self.clock.monotonic()
        if 0 < linger < wait:
            wait = linger
        return self._flush_wait(wait)

    def _look_at_switch(self) -> None:
        """While held back, read the switch at every step: an operator on another host (or
        on SQLite, in another process) may have switched the item on again unannounced."""
        target = self.settings.target
        if self.store.item_overrides().get(target, self.settings.enabled):
            self.held_back.clear()

    def _free_slots(self) -> int:
        with self._lock:
            if self._suspect is not None or self.clock.monotonic() < self._linger_until:
                return 0
            if self.settings.pool_size > 1:
                hold, again_at = self._pool_batch()
                if self._outstanding > again_at:  # the next batch is claimed meanwhile
                    return 0
                return min(max(hold - self._outstanding, 0), MAX_BATCH)
            if self._outstanding > self._refill_at:  # the next batch is claimed meanwhile
                return 0
            return max(1, min(MAX_BATCH, int(BATCH_WINDOW / max(self._seconds_per_message,
                                                                1e-6))))

    def _pool_batch(self) -> tuple[int, int]:
        """For ``pool_size > 1``: (messages to hold — in the workers' hands and queued for
        them —, claim again once no more than this many are left). A fast item claims about
        :data:`BATCH_WINDOW` of its pool's work at once, and the next batch as big once half
        of it is done, so its workers take from a local batch instead of waiting for a claim
        each (one transaction per message would make more workers slower), and a claim costs
        it no more per message than a ``pool_size = 1`` item's; a slow one, whose batch would
        be no bigger than its pool, holds one message per worker, claimed as each worker
        frees. A ticked dispatcher (the virtual clock) keeps to one per worker."""
        pool = self.settings.pool_size
        if not self.batched:
            return pool, pool - 1
        batch = min(MAX_BATCH, int(BATCH_WINDOW * pool / max(self._seconds_per_message, 1e-6)))
        if batch <= pool:
            return pool, pool - 1
        again_at = max(pool, batch // 2)
        return again_at + batch, again_at

    def _claim(self, limit: int) -> int:
        s = self.settings
        started = self.clock.monotonic()
        with self._lock:
            held = self.book.ids() if s.fifo else []
            alone = self._outstanding == 0  # a suspect may be claimed (delivered alone)
            self._looked_alone = alone
        with self._committing() as pending:
            done, claimed = self.store.complete_and_claim(
                pending, now=self.clock.now(), target=s.target, owner=s.owner,
                lease_seconds=s.lease_seconds, limit=limit, fifo=s.fifo, begin=s.begin,
                enabled=s.enabled, held=held, alone=alone,
                server=self.server() if s.begin else None)
            self._committed(pending, done)
        with self._lock:
            self.book.took(claimed, started)
            for c in claimed:
                if c.interrupted:
                    self._suspect = c.row.id
            self._outstanding += len(claimed)
            if claimed:
                self.claims += 1
                self._refill_at = max(1, len(claimed) // 2)
            if 0 < len(claimed) < limit:  # the queue ran dry: let a few arrive
                self._linger_until = self.clock.monotonic() + self.linger
        for chunk in self._chunks(claimed):
            self.work.put((self.claims, chunk))
        return len(claimed)

    def _chunks(self, claimed: list[Claimed]) -> Iterator[tuple[Claimed, ...]]:
        """``claimed`` cut into chunks of about :data:`CHUNK_WORK` of one worker's work (one
        chunk for a ``pool_size = 1`` item, one message per chunk for a slow item)."""
        if self.settings.pool_size == 1:
            size = len(claimed)
        else:
            with self._lock:
                alone = self._fastest
            size = max(1, int(CHUNK_WORK / max(alone, 1e-6)))
        for start in range(0, len(claimed), max(size, 1)):
            yield tuple(claimed[start:start + size])

    def give_back(self, batch: int, rest: tuple[Claimed, ...]) -> bool:
        """A worker hands the undelivered ``rest`` of its chunk to the item's workers after
        a slow answer: one message per hand-off, as a slow item's are. False after the stop,
        whose last word to the workers is queued already (they would never see ``rest``):
        the worker keeps ``rest`` and puts it back in the queue itself."""
        with self._lock:
            if self._closed:
                return False
            for claimed in rest:
                self.work.put((batch, (claimed,)))
        return True

    def _idle_wait(self) -> float:
        """Nothing to claim: until the next parked message is due, at most poll_interval
        (a due message that could not be claimed — held by a claim, the item off — is
        looked at again after poll_interval)."""
        poll = self.settings.poll_interval
        due = self.store.next_due_time(self.settings.target)
        if due is None:
            return poll
        seconds = (due - self.clock.now()).total_seconds()
        return poll if seconds <= 0 else min(seconds, poll)

    def _flush_wait(self, wait: float) -> float:
        with self._lock:
            if not self._pending:
                return wait
            left = FLUSH_WINDOW - (self.clock.monotonic() - self._oldest_pending)
        return max(min(wait, left), 0.0)

    def flush(self) -> None:
        """Write the pending successes in one transaction (a group commit)."""
        with self._committing() as pending:
            if pending:
                self._committed(pending, self.store.complete_many(pending,
                                                                  now=self.clock.now()))

    @contextmanager
    def _committing(self) -> Iterator[list[Completion]]:
        """The pending successes, taken for a commit; given back if it fails."""
        with self._lock:
            pending, self._pending = self._pending, []
            self._pending_ids = set()
        try:
            yield pending
        except BaseException:
            with self._lock:  # keep them for the next try, oldest first
                self._pending[:0] = pending
                self._pending_ids.update(c.message_id for c in pending)
            raise

    def commit_own(self, completions: list[Completion]) -> None:
        """A worker's own commit of the successes it kept (:class:`OwnCommits`); if it
        fails, they wait for the group commit instead."""
        failed = True
        try:
            self._committed(completions, self.store.complete_many(completions,
                                                                  now=self.clock.now()))
            failed = False
        except EncoreError as exc:
            log.warning("item %s: %d success(es) are recorded with the next group commit: %s",
                        self.settings.target, len(completions), exc)
        except Exception:  # the worker must outlive one bad commit
            log.exception("item %s: %d success(es) are recorded with the next group commit "
                          "after an unexpected error", self.settings.target, len(completions))
        if failed:
            for completion in completions:
                self.defer(completion)
        with self._lock:
            self._kept -= len(completions)
        if failed or self._closed:
            self.wakeup.set()  # a group commit to make, or a stop waiting for this one

    def _committed(self, pending: list[Completion], done_ids: list[int]) -> None:
        done = set(done_ids)
        lost = [c.message_id for c in pending if c.message_id not in done]
        if lost:
            log.warning("item %s: message(s) %s were taken over by another daemon before "
                        "their success was recorded; that daemon's delivery counts",
                        self.settings.target, lost)
        self.book.committed(pending)

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except EncoreError as exc:
            log.error("item %s: could not record successes at stop (their attempts count as "
                      "outcome unknown): %s", self.settings.target, exc)
            with self._lock:
                self._pending.clear()
                self._pending_ids.clear()


class OwnCommits:
    """The successes of one worker of a pool on a server database, committed by the worker
    itself at the end of each chunk, in one transaction on a connection of its own: a pool's
    commits then run side by side with each other and with the dispatcher's claims, instead
    of one after the other on the dispatcher's thread. A success someone waits for is
    committed at once, as any (:meth:`Dispatcher.defer`), and so are the successes of a
    chunk of one message (a slow item's): the group commit gathers those of all the workers.
    Until its commit, a success's claim is held (the heartbeat renews it) and a stop waits
    for it."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.chunk = 0  # messages in the chunk being delivered
        self._oldest = 0.0  # monotonic seconds: when the oldest success kept was
        self._pending: list[Completion] = []
        self._ids: set[int] = set()

    def defer(self, completion: Completion) -> None:
        """Where the worker's successes go (its ``defer``)."""
        if completion.urgent or self.chunk < 2:
            self.dispatcher.defer(completion)
        else:
            if not self._pending:
                self._oldest = self.dispatcher.clock.monotonic()
            self._pending.append(completion)
            self._ids.add(completion.message_id)

    def due(self) -> bool:
        """A success kept has waited :data:`FLUSH_WINDOW`: commit now, chunk done or not."""
        return bool(self._pending) and (self.dispatcher.clock.monotonic() - self._oldest
                                        >= FLUSH_WINDOW)

    def finished(self, message_id: int, seconds: float, *, ended: bool) -> None:
        """:meth:`Dispatcher.finished`, told whether the success waits here."""
        self.dispatcher.finished(message_id, seconds, ended=ended,
                                 kept=message_id in self._ids)

    def flush(self) -> None:
        """Commit the successes kept (if that fails, the group commit takes them)."""
        if self._pending:
            pending, self._pending, self._ids = self._pending, [], set()
            self.dispatcher.commit_own(pending)
