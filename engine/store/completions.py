"""Waiting for a message to end, woken by the commit that ends it (docs/waiting.md).

A waiter registers before it looks; whatever ends a waited-for message announces it after
its commit, so no end is missed. Waiters also look every :data:`SAFETY_POLL` seconds in case
an announcement was lost.
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
# a virtual clock's sleep runs the harness's deliveries, so a short period sees each end
VIRTUAL_POLL = 0.05
STOP_CHECK = 0.25  # seconds between looks at ``stop`` while waiting on a thread
RECENT = 4096  # ended ids a hub remembers, so that a waiter who just registered need not look
RECENT_RESPONSES = 256  # responses of unwatched ends kept for a waiter about to look
RECENT_RESPONSE_BYTES = 64 * 1024

Waker = Callable[[], object]
Kept = tuple["str | None", "str | None"]  # a response kept for a waiter: (class, body)
T = TypeVar("T")
K = TypeVar("K")


class Hop(Protocol):
    """A hop to a thread and back (:func:`engine.serving.threads.to_thread`)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


class CompletionHub:
    """The waiters of one store in this process, by message id."""

    def __init__(self, on_first_watch: Callable[[], object] | None = None) -> None:
        """``on_first_watch``: called once, before the first waiter registers."""
        self._lock = threading.Lock()
        self._first_lock = threading.Lock()
        self._waiters: dict[int, list[Waker]] = {}
        self._on_first_watch = on_first_watch
        self._recent: deque[int] = deque(maxlen=RECENT)
        self._recent_set: set[int] = set()
        # message id → (class, body) of a completion here, for the waiters in this process
        self._responses: dict[int, Kept] = {}
        # the same, for the last completions nobody watched yet
        self._recent_responses: OrderedDict[int, Kept] = OrderedDict()

    @property
    def hearing(self) -> bool:
        """True once this process hears the ends announced by other processes."""
        return self._on_first_watch is None

    def start_hearing(self) -> None:
        """Hear other processes from now on; may wait for a listener to connect."""
        if self._on_first_watch is None:
            return
        with self._first_lock:
            if self._on_first_watch is not None:
                self._on_first_watch()
                self._on_first_watch = None

    @contextmanager
    def watching(self, message_id: int, wake: Waker) -> Iterator[None]:
        """Call ``wake()`` when ``message_id`` may have ended, while the block runs."""
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
        """True if the end of ``message_id`` was announced here among the last
        :data:`RECENT` ends. An end committed before a waiter registered was announced
        before it, so a waiter of a just-accepted message asks this instead of reading."""
        with self._lock:
            return message_id in self._recent_set

    def completed(self, responses: Mapping[int, Kept]) -> None:
        """Keep the responses ``(class, body)`` of messages committed Completed here, for
        their waiters; called after the commit, before its announcement."""
        with self._lock:
            for message_id, kept in responses.items():
                if message_id in self._waiters:
                    self._responses[message_id] = kept
                elif kept[1] is None or len(kept[1]) <= RECENT_RESPONSE_BYTES:
                    self._recent_responses[message_id] = kept
                    if len(self._recent_responses) > RECENT_RESPONSES:
                        self._recent_responses.popitem(last=False)

    def kept(self, message_id: int) -> Kept | None:
        """``(class, body)`` when ``message_id`` completed here lately; None: read it."""
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
            if not self._waiters:
                return
            wakers = [w for i in ids for w in self._waiters.get(i, ())]
        for wake in wakers:
            wake()

    def wake_all(self) -> None:
        """Wake every waiter to look again."""
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

    def wait(self, message_id: int, read: Callable[[], T | None], timeout: float, *,
             kept: Callable[[Kept], K] | None = None, fresh: bool = False,
             mark: Callable[[], object] | None = None, poll: float = SAFETY_POLL,
             stop: threading.Event | None = None, clock: Clock | None = None) -> T | K | None:
        """Wait on this thread up to ``timeout`` seconds for ``message_id`` to end.

        Returns what ``read()`` (None while not ended) or ``kept(response)`` returns, or None
        on timeout or ``stop``. ``fresh``: accepted after :attr:`hearing`, so look first only
        if it ended lately. ``mark``: called once registered, before the first look."""
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
        """:meth:`wait` on an event loop, each ``read`` run through ``hop``."""
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
        except RuntimeError:
            pass

    def _settle(self) -> None:
        if not self._future.done():
            self._future.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until set since the last wait, or ``timeout`` seconds."""
        if not self._future.done():
            timer = self._loop.call_later(timeout, self._settle)
            try:
                await self._future
            finally:
                timer.cancel()
        self._future = self._loop.create_future()
