"""Waiting for a message to end, woken by the commit that ends it (docs/architecture.md, "Waiting is
an event").

A waiter registers a callback for a message id (:meth:`CompletionHub.watching`) *before* it
looks at the message, and the message carries a ``waited`` flag set with its intake (or by
:meth:`~engine.store.sql.SqlStore.mark_waited`). Whatever ends a waited-for message —
Completed, Error, Suspended, Discarded, Aborted — announces it after its commit (never
before): in this process through the hub's callbacks, to other processes by NOTIFY on
PostgreSQL (sent in the ending transaction) or the SQLite doorbell. So a completion either
committed before the waiter's look, which then sees it, or is announced after the callback
was registered: none is missed. Bulk traffic, which nobody waits for, announces nothing.

A success committed in this process also leaves its response with the hub for the waiters
registered here (:meth:`CompletionHub.completed`, before the announcement), so the waiter
woken answers without reading the message back (:meth:`CompletionHub.kept`); any other
end, or one committed elsewhere, is read from the database.

Announcements can still be lost (a listener reconnecting, a full socket buffer): waiters
look again every :data:`SAFETY_POLL` seconds whatever happens, and all of them look again
when a listener reconnects.

Every waiter waits through the hub, by one of its two faces: :meth:`CompletionHub.wait` on a
thread (the client, the CLI, a business process's sync call) and
:meth:`CompletionHub.wait_async` on an event loop (the intake's ``?wait``, the inbound
services), which hops to a thread only to read.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol, TypeVar

from engine.clock import Clock, SystemClock, VirtualClock
from engine.store.notify import Announcement, Kind

SAFETY_POLL = 2.0  # seconds between a waiter's looks when no announcement reaches it
# seconds between two looks at a waited-for message on a virtual clock, whose sleep runs the
# harness's deliveries: the look after a target's delivery sees its end when it happens
VIRTUAL_POLL = 0.05
STOP_CHECK = 0.25  # seconds between looks at a ``stop`` event while waiting on a thread
RECENT = 4096  # ended ids a hub remembers, so that a waiter who just registered need not look
RECENT_RESPONSES = 256  # responses of unwatched ends a hub keeps for a waiter about to look
RECENT_RESPONSE_BYTES = 64 * 1024  # characters of such a response at most

Waker = Callable[[], object]
Kept = tuple["str | None", "str | None"]  # a response kept for a waiter: (class, body)
T = TypeVar("T")
K = TypeVar("K")


class Hop(Protocol):
    """What a waiter on an event loop runs a blocking call through: a hop to a thread and
    back (:func:`engine.serving.threads.to_thread`)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


class CompletionHub:
    """The waiters of one store in this process, by message id."""

    def __init__(self, on_first_watch: Callable[[], object] | None = None) -> None:
        """``on_first_watch``: called (once) before the first waiter registers — the store
        starts hearing other processes then."""
        self._lock = threading.Lock()
        self._first_lock = threading.Lock()
        self._waiters: dict[int, list[Waker]] = {}
        self._on_first_watch = on_first_watch
        # waited-for messages whose end was announced here lately, oldest first
        self._recent: deque[int] = deque(maxlen=RECENT)
        self._recent_set: set[int] = set()
        # message id → its response, (class, body; None: no response), once it completed
        # here, for the messages with a waiter in this process
        self._responses: dict[int, Kept] = {}
        # the same for the last messages that completed here with nobody watching yet
        self._recent_responses: OrderedDict[int, Kept] = OrderedDict()

    @property
    def hearing(self) -> bool:
        """True once this process hears the ends announced by others (after the first
        watch, which starts the hearing, and for good): a message accepted from then on has
        its end announced here, whoever commits it."""
        return self._on_first_watch is None

    def start_hearing(self) -> None:
        """Hear other processes from now on, as the first watch does. It may wait for a
        listener to connect (PostgreSQL): a waiter on an event loop calls it on a thread
        first."""
        if self._on_first_watch is None:
            return
        with self._first_lock:  # a second caller waits until the hearing has begun
            if self._on_first_watch is not None:
                self._on_first_watch()
                self._on_first_watch = None

    @contextmanager
    def watching(self, message_id: int, wake: Waker) -> Iterator[None]:
        """Call ``wake()`` (from any thread) when ``message_id`` may have ended, while the
        block runs."""
        self.start_hearing()
        with self._lock:
            self._waiters.setdefault(message_id, []).append(wake)
        try:
            yield
        finally:
            with self._lock:
                wakers = self._waiters.get(message_id)
                if wakers is not None:
                    if wake in wakers:
                        wakers.remove(wake)
                    if not wakers:
                        del self._waiters[message_id]
                        self._responses.pop(message_id, None)

    def ended_lately(self, message_id: int) -> bool:
        """True if the end of ``message_id`` was announced to this hub lately (the last
        :data:`RECENT` ends). A waiter that registered for a message it has just accepted
        asks this instead of reading the message: an end committed before the registration
        was announced before it (announcements follow their commit on the committing thread,
        or come from another process, and then a lost one is the safety net's), so it is
        remembered here; one committed after wakes the waiter."""
        with self._lock:
            return message_id in self._recent_set

    def completed(self, responses: Mapping[int, Kept]) -> None:
        """The messages of ``responses`` were committed Completed with these responses
        (``(class, body)``; body None: no response) in this process: kept for their waiters
        here, until the last of them stops watching — and, for one nobody watches yet (it
        ended before its waiter registered: a direct take is that fast), the last
        :data:`RECENT_RESPONSES` bodies of at most :data:`RECENT_RESPONSE_BYTES`. Called
        after the commit, before its announcement."""
        with self._lock:
            for message_id, kept in responses.items():
                if message_id in self._waiters:
                    self._responses[message_id] = kept
                elif kept[1] is None or len(kept[1]) <= RECENT_RESPONSE_BYTES:
                    self._recent_responses[message_id] = kept
                    if len(self._recent_responses) > RECENT_RESPONSES:
                        self._recent_responses.popitem(last=False)

    def kept(self, message_id: int) -> Kept | None:
        """``(response class, body)`` (body None: no response) when ``message_id``
        completed in this process lately; None: read it."""
        with self._lock:
            found = self._responses.get(message_id)
            return found if found is not None else self._recent_responses.get(message_id)

    def ended(self, ids: Iterable[int]) -> None:
        """``ids`` ended (their commit is done): wake their waiters."""
        ids = list(ids)
        with self._lock:
            for i in ids:
                if len(self._recent) == RECENT:
                    self._recent_set.discard(self._recent[0])
                self._recent.append(i)
                self._recent_set.add(i)
            if not self._waiters:  # bulk traffic has no waiters: nothing more to do
                return
            wakers = [w for i in ids for w in self._waiters.get(i, ())]
        for wake in wakers:
            wake()

    def wake_all(self) -> None:
        """Wake every waiter to look again (announcements may have been lost, or a stop
        was asked for)."""
        with self._lock:
            wakers = [w for ws in self._waiters.values() for w in ws]
        for wake in wakers:
            wake()

    def hear(self, note: Announcement) -> None:
        """An announcement callback: "done" announcements wake their waiters."""
        if note.kind is Kind.DONE:
            self.ended(note.ids)

    @property
    def waiting(self) -> int:
        """How many messages have a waiter."""
        return len(self._waiters)

    # -- the two faces of a wait ---------------------------------------------------------
    def wait(self, message_id: int, read: Callable[[], T | None], timeout: float, *,
             kept: Callable[[Kept], K] | None = None, fresh: bool = False,
             mark: Callable[[], object] | None = None, poll: float = SAFETY_POLL,
             stop: threading.Event | None = None, clock: Clock | None = None) -> T | K | None:
        """Wait on this thread up to ``timeout`` seconds (``math.inf``: no limit) for
        ``message_id`` to end: what ``read()`` returns once it has (``read`` returns None
        while it has not), or None if time ran out or ``stop`` was set first.

        ``kept``: turns the response this hub kept for a message that completed here
        (:meth:`kept`) into the result, instead of a read. ``fresh``: the message was
        accepted waited-for after this hub was :attr:`hearing`, so the first look is made
        only if it ended lately. ``mark``: called once the waiter is registered, before the
        first look (it flags the message waited-for). ``poll`` is only the safety net's
        period. On a :class:`~engine.clock.VirtualClock` the wait looks every
        :data:`VIRTUAL_POLL` virtual seconds instead, each sleep running the harness's
        deliveries, and reads every time (whether the end came in time is the clock's to
        say, not the hub's)."""
        clock = clock or SystemClock()
        deadline = clock.monotonic() + timeout
        if isinstance(clock, VirtualClock):
            return _wait_virtual(read, deadline, clock, stop)
        woken = threading.Event()
        with self.watching(message_id, woken.set):
            found: T | K | None = None
            if not fresh or self.ended_lately(message_id):
                if mark is not None:
                    mark()
                found = self._look(message_id, read, kept)
            while found is None:
                left = deadline - clock.monotonic()
                if left <= 0 or _pause(woken, min(left, poll), stop):
                    return None
                woken.clear()  # before the look: an end announced during it wakes the next wait
                found = self._look(message_id, read, kept)
            return found

    async def wait_async(self, message_id: int, read: Callable[[], T | None], timeout: float,
                         *, hop: Hop, kept: Callable[[Kept], K] | None = None,
                         fresh: bool = False, poll: float = SAFETY_POLL,
                         stop: threading.Event | None = None) -> T | K | None:
        """:meth:`wait` for a caller on an event loop: registered and woken on the loop, each
        ``read`` (and the start of the hearing, which may wait for a listener to connect)
        run through ``hop``; a kept response is taken on the loop, with no hop at all."""
        if not self.hearing:
            await hop(self.start_hearing)
        deadline = time.monotonic() + timeout
        woken = _Wake(asyncio.get_running_loop())
        with self.watching(message_id, woken.set):
            found: T | K | None = None
            if not fresh or self.ended_lately(message_id):
                found = await self._look_async(message_id, read, kept, hop)
            while found is None and (left := deadline - time.monotonic()) > 0:
                if stop is not None and stop.is_set():
                    return None
                await woken.wait(min(left, poll))
                found = await self._look_async(message_id, read, kept, hop)
            return found

    def _look(self, message_id: int, read: Callable[[], T | None],
              kept: Callable[[Kept], K] | None) -> T | K | None:
        response = self.kept(message_id) if kept is not None else None
        return read() if response is None or kept is None else kept(response)

    async def _look_async(self, message_id: int, read: Callable[[], T | None],
                          kept: Callable[[Kept], K] | None, hop: Hop) -> T | K | None:
        response = self.kept(message_id) if kept is not None else None
        return await hop(read) if response is None or kept is None else kept(response)


def _pause(woken: threading.Event, seconds: float, stop: threading.Event | None) -> bool:
    """Wait up to ``seconds`` for ``woken``; True if ``stop`` was set instead."""
    if stop is None:
        woken.wait(seconds)
        return False
    clock = SystemClock()
    end = clock.monotonic() + seconds
    while not woken.wait(min(STOP_CHECK, max(end - clock.monotonic(), 0.0))):
        if stop.is_set():
            return True
        if clock.monotonic() >= end:
            return False
    return stop.is_set()


def _wait_virtual(read: Callable[[], T | None], deadline: float, clock: Clock,
                  stop: threading.Event | None) -> T | None:
    while True:
        found = read()
        if found is not None:
            return found
        if clock.monotonic() >= deadline:
            return None
        if clock.sleep(min(VIRTUAL_POLL, deadline - clock.monotonic()), stop):
            return None


class _Wake:
    """A wake-up for a waiter on an event loop, set from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future: asyncio.Future[None] = loop.create_future()

    def set(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._settle)
        except RuntimeError:  # the loop closed: nobody waits any more
            pass

    def _settle(self) -> None:
        if not self._future.done():
            self._future.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until set (since the last wait), or ``timeout`` seconds."""
        if not self._future.done():
            timer = self._loop.call_later(timeout, self._settle)
            try:
                await self._future
            finally:
                timer.cancel()
        self._future = self._loop.create_future()  # before the look: a later set counts
