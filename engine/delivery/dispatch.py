"""The dispatcher of one item: batch claims in, group-committed successes out.

One thread per item claims due messages for the idle workers, hands them over in chunks and
writes their successes in one transaction (:mod:`engine.delivery.commits`; docs/architecture.md,
"Throughput"; a suspect is claimed only while the item holds nothing else: "Poison messages").
How it claims and commits is fixed when it is made (:class:`DispatchTuning`): a dispatcher that
is stepped on a virtual clock neither lingers nor sizes batches by the clock's speed.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from engine.clock import Clock
from engine.delivery.claims import ClaimBook
from engine.delivery.commits import FLUSH_WINDOW, GroupCommit
from engine.errors import EncoreError
from engine.store.hotpath import Claimed, Completion, Grant
from engine.store.sql import SqlStore

log = logging.getLogger(__name__)

BATCH_WINDOW = 0.05  # seconds of work a pool_size = 1 item claims at once
MAX_BATCH = 100  # messages one claim takes at most
FIRST_BATCH = 4  # a pool_size = 1 item's first claim, before it knows how long work takes
# seconds to wait after a claim that emptied the queue: messages arriving one by one are then
# claimed a few at a time
CLAIM_LINGER = 0.005
# seconds of one worker's work per hand-off; one slower message gives the rest back
CHUNK_WORK = 0.005
CHUNK_GIVE_BACK = 2 * CHUNK_WORK
# the fastest recent delivery rises by this factor per delivery, to follow a service that slows
FASTEST_DRIFT = 1.05
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


@dataclass(frozen=True, kw_only=True)
class DispatchTuning:
    """How a dispatcher claims and commits, as the runtime that runs it wants.

    ``linger``: seconds to wait after a claim that emptied the queue. ``batched``: a pool claims
    by its speed (False: one message per idle worker). ``urgent_here``: an urgent success is
    written on its worker's thread (False: at the dispatcher's next step).
    """

    linger: float = CLAIM_LINGER
    batched: bool = True
    urgent_here: bool = True


class Dispatcher:
    """Feeds one item's workers; ``ready()`` is asked before each claim, ``direct()`` before each
    direct take (None: none), ``server()`` names the server an attempt begun with a claim goes to.
    """

    def __init__(self, settings: DispatchSettings, *, store: SqlStore, clock: Clock,
                 ready: Callable[[], bool], stop: threading.Event,
                 tuning: DispatchTuning = DispatchTuning(),
                 direct: Callable[[], bool] | None = None,
                 server: Callable[[], str | None] = lambda: None) -> None:
        self.settings = settings
        self.tuning = tuning
        self.book = ClaimBook(store, clock, target=settings.target, owner=settings.owner,
                              lease_seconds=settings.lease_seconds)
        self.store = store
        self.clock = clock
        self.ready = ready
        self.direct = direct
        self.server = server
        self.stop = stop
        self.wakeup = threading.Event()
        self.commits = GroupCommit(store, clock, self.book, target=settings.target,
                                   urgent_here=tuning.urgent_here, wakeup=self.wakeup)
        # (claim number, messages in delivery order) for the workers; None tells one to stop
        self.work: queue.SimpleQueue[tuple[int, tuple[Claimed, ...]] | None] = \
            queue.SimpleQueue()
        self.claims = 0
        self.held_back = threading.Event()  # an operator switched the item off
        self._lock = threading.Lock()
        self._outstanding = 0  # claims handed to workers and not finished
        self._kept = 0  # successes finished and waiting for their worker's own commit
        self._suspect: int | None = None  # a suspect being delivered: claim nothing more
        self._looked_alone = True  # the last claim was made with nothing in hand
        self._seconds_per_message = BATCH_WINDOW / FIRST_BATCH
        self._fastest = BATCH_WINDOW / FIRST_BATCH  # seconds: see FASTEST_DRIFT
        self._refill_at = 1  # pool_size = 1: claim again when this many are left to work
        self._next_expiry_scan = 0.0
        self._closed = False  # the workers were told to stop: no direct take any more
        self._linger_until = 0.0
        # set before a claim looks at the queue, so a message committed after the look wakes it
        self.awaits_work = True
        self._thread: threading.Thread | None = None

    def defer(self, completion: Completion) -> None:
        """Record a success with the next group commit (an ``urgent`` one at once)."""
        self.commits.defer(completion)

    def commit_now(self, completion: Completion) -> None:
        """Commit one success on the caller's thread before returning (a FIFO item's next message
        must not be sent first). If the database refuses, wait for the group commit."""
        try:
            done = self.store.complete_many([completion], now=self.clock.now(),
                                            durable=self.store.is_postgres)
        except EncoreError as exc:
            log.warning("item %s: the success of message %d waits for the group commit: %s",
                        self.settings.target, completion.message_id, exc)
        else:
            self.commits.committed([completion], done)
            return
        self.commits.defer(completion)
        self.wakeup.set()
        waits = self.tuning.urgent_here  # else the next step writes it: nothing to wait for here
        while waits and not self._closed and completion.message_id in self.book.ids():
            self.clock.sleep(FLUSH_WINDOW)  # the claim book lets it go once it is written

    def finished(self, message_id: int, seconds: float, *, ended: bool = False,
                 kept: bool = False) -> None:
        """A worker is done with ``message_id`` after ``seconds``. ``ended``: the worker committed
        the message's end itself. ``kept``: its success waits for the worker's own commit
        (:class:`~engine.delivery.commits.OwnCommits`)."""
        with self._lock:
            self._outstanding -= 1
            suspect = message_id == self._suspect
            if suspect:
                self._suspect = None
            pending = self.commits.is_pending(message_id)
            self.book.let_go(message_id, pending=pending or kept)
            if kept:
                self._kept += 1
                ended = True
            self._seconds_per_message += (seconds - self._seconds_per_message) * 0.2
            self._fastest = min(self._fastest * FASTEST_DRIFT, seconds)
            again_at = (self._pool_batch()[1] if self.settings.pool_size > 1
                        else self._refill_at)
            idle = self._outstanding <= again_at
            # A dispatcher waiting for new work is not woken by a finish that added nothing to the
            # queue: it leaves the interpreter to whoever waited for this message.
            quiet = (ended and self.awaits_work and not pending and not suspect
                     and not self.settings.fifo
                     and (self._outstanding > 0 or self._looked_alone))
        if idle and not quiet:
            self.wakeup.set()

    def reserve(self) -> Grant | None:
        """Reserve a free worker for a waited-for message; None if none may take it."""
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
        """Hand the reserved worker its message; after the stop it goes back to the queue unsent."""
        with self._lock:
            if not self._closed:
                self.book.took([claimed], self.clock.monotonic())
                self.claims += 1
                self.work.put((self.claims, (claimed,)))
                self._linger_until = self.clock.monotonic() + self.tuning.linger
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
        """New work was committed for the item: wake the dispatcher if it waits for work."""
        if urgent:
            with self._lock:
                self._linger_until = 0.0
            self.wakeup.set()
        elif self.awaits_work:
            self.wakeup.set()

    def switch(self, enabled: bool) -> None:
        """An operator (or reply code action D) switched the item on or off."""
        if enabled:
            self.held_back.clear()
        else:
            self.held_back.set()
        self.wakeup.set()

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
            self.wakeup.clear()
            try:
                wait = self.tick()
            except EncoreError as exc:
                log.error("item %s: %s; trying again in %.0f s", self.settings.target, exc,
                          STORE_RETRY_DELAY)
                wait = STORE_RETRY_DELAY
            except Exception:
                log.exception("item %s: unexpected error in the dispatcher",
                              self.settings.target)
                wait = STORE_RETRY_DELAY
            self.wakeup.wait(wait)
        with self._lock:
            self._closed = True
            for _ in range(self.settings.pool_size):
                self.work.put(None)  # after what is queued: workers put those back, then stop
        self._drain()

    def _drain(self) -> None:
        """After a stop: group-commit the successes of the workers as they finish."""
        while True:
            with self._lock:
                busy = self._outstanding > 0 or self._kept > 0
            self.commits.flush_quietly()
            if not busy:
                return
            self.wakeup.clear()
            self.wakeup.wait(FLUSH_WINDOW)

    def tick(self) -> float:
        """One step: commit, take back expired claims, claim; returns seconds to wait."""
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
        self.awaits_work = False
        slots = self._free_slots()
        if slots and not self.held_back.is_set() and self.ready():
            self.awaits_work = True
            claimed = self._claim(slots)
            if claimed == slots and self._free_slots():
                return 0.0  # workers finished meanwhile and the queue may hold more
            if claimed:
                self.awaits_work = False
            else:
                wait = self._idle_wait()
        elif self.commits.wait(wait) == 0.0:
            self.commits.flush()
        with self._lock:
            linger = self._linger_until - self.clock.monotonic()
        if 0 < linger < wait:
            wait = linger
        return self.commits.wait(wait)

    def _look_at_switch(self) -> None:
        """While held back, re-read the switch (another process may have turned it on)."""
        target = self.settings.target
        if self.store.item_overrides().get(target, self.settings.enabled):
            self.held_back.clear()

    def _free_slots(self) -> int:
        with self._lock:
            if self._suspect is not None or self.clock.monotonic() < self._linger_until:
                return 0
            if self.settings.pool_size > 1:
                hold, again_at = self._pool_batch()
                if self._outstanding > again_at:
                    return 0
                return min(max(hold - self._outstanding, 0), MAX_BATCH)
            if self._outstanding > self._refill_at:
                return 0
            return max(1, min(MAX_BATCH, int(BATCH_WINDOW / max(self._seconds_per_message,
                                                                1e-6))))

    def _pool_batch(self) -> tuple[int, int]:
        """For ``pool_size > 1``: (messages to hold, claim again at this many left), by the pool's
        speed."""
        pool = self.settings.pool_size
        if not self.tuning.batched:
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
        with self.commits.taking() as pending:
            done, claimed = self.store.complete_and_claim(
                pending, now=self.clock.now(), target=s.target, owner=s.owner,
                lease_seconds=s.lease_seconds, limit=limit, fifo=s.fifo, begin=s.begin,
                enabled=s.enabled, held=held, alone=alone,
                server=self.server() if s.begin else None)
            self.commits.committed(pending, done)
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
                self._linger_until = self.clock.monotonic() + self.tuning.linger
        for chunk in self._chunks(claimed):
            self.work.put((self.claims, chunk))
        return len(claimed)

    def _chunks(self, claimed: list[Claimed]) -> Iterator[tuple[Claimed, ...]]:
        """``claimed`` cut into chunks of about :data:`CHUNK_WORK` of one worker's work."""
        if self.settings.pool_size == 1:
            size = len(claimed)
        else:
            with self._lock:
                alone = self._fastest
            size = max(1, int(CHUNK_WORK / max(alone, 1e-6)))
        for start in range(0, len(claimed), max(size, 1)):
            yield tuple(claimed[start:start + size])

    def give_back(self, batch: int, rest: tuple[Claimed, ...]) -> bool:
        """Hand the rest of a worker's chunk to the others; False after the stop."""
        with self._lock:
            if self._closed:
                return False
            for claimed in rest:
                self.work.put((batch, (claimed,)))
        return True

    def _idle_wait(self) -> float:
        """Nothing to claim: wait until the next parked message is due, at most poll_interval."""
        poll = self.settings.poll_interval
        due = self.store.next_due_time(self.settings.target)
        if due is None:
            return poll
        seconds = (due - self.clock.now()).total_seconds()
        return poll if seconds <= 0 else min(seconds, poll)

    def flush(self) -> None:
        """Write the pending successes in one transaction (a group commit)."""
        self.commits.flush()

    def commit_own(self, completions: list[Completion]) -> None:
        """A worker's own commit of its kept successes; if it fails, the group commit takes them."""
        failed = True
        try:
            self.commits.committed(completions, self.store.complete_many(completions,
                                                                         now=self.clock.now()))
            failed = False
        except EncoreError as exc:
            log.warning("item %s: %d success(es) are recorded with the next group commit: %s",
                        self.settings.target, len(completions), exc)
        except Exception:
            log.exception("item %s: %d success(es) are recorded with the next group commit "
                          "after an unexpected error", self.settings.target, len(completions))
        if failed:
            for completion in completions:
                self.commits.defer(completion)
        with self._lock:
            self._kept -= len(completions)
        if failed or self._closed:
            self.wakeup.set()
