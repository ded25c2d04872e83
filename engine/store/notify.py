"""Announcements: waking idle workers and waiters at the commit that concerns them
(docs/waiting.md).

An :class:`Announcement` travels as JSON. :class:`QueueAnnouncer` sends: ``notify`` inside the
transaction (PostgreSQL NOTIFY), ``call_back`` after its commit (in-process callbacks, SQLite
doorbells). :class:`QueueListener` receives on PostgreSQL. Polling stays the safety net.
"""
from __future__ import annotations

import enum
import json
import logging
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

log = logging.getLogger(__name__)

QUEUE_CHANNEL = "encore_queue"  # work, switches, breakers, console actions
DONE_CHANNEL = "encore_done"  # ends of waited-for messages
LISTEN_TIMEOUT = 0.5
RECONNECT_DELAY = 2.0
MAX_IDS = 500  # a NOTIFY payload holds 8,000 bytes


class Kind(enum.Enum):
    """What an announcement says."""

    WORK = "work"  # ``urgent``: someone waits for it
    SWITCH = "switch"
    BREAKER = "breaker"
    DONE = "done"  # ``ids`` ended
    RESTART = "restart"
    RELOAD = "reload"
    RELOADED = "reloaded"  # daemon ``item`` reloaded


@dataclass(frozen=True)
class Announcement:
    """One thing to tell the daemons and waiters."""

    kind: Kind
    item: str = ""
    enabled: bool = False
    urgent: bool = False
    ids: tuple[int, ...] = ()

    @classmethod
    def work(cls, item: str, *, urgent: bool = False) -> Announcement:
        return cls(Kind.WORK, item=item, urgent=urgent)

    @classmethod
    def switch(cls, item: str, enabled: bool) -> Announcement:
        return cls(Kind.SWITCH, item=item, enabled=enabled)

    @classmethod
    def breaker(cls, item: str) -> Announcement:
        return cls(Kind.BREAKER, item=item)

    @classmethod
    def control(cls, kind: Kind, item: str = "") -> Announcement:
        """A console announcement, tagged with a random id: its sender hears it twice on
        PostgreSQL and must act once."""
        return cls(kind, item=item, ids=(random.getrandbits(52),))

    @classmethod
    def done(cls, ids: Iterable[int]) -> Announcement:
        return cls(Kind.DONE, ids=tuple(int(i) for i in ids))

    @property
    def channel(self) -> str:
        return DONE_CHANNEL if self.kind is Kind.DONE else QUEUE_CHANNEL

    def to_json(self) -> str:
        data: dict[str, Any] = {"kind": self.kind.value}
        if self.kind is Kind.DONE:
            data["ids"] = list(self.ids)
        else:
            data["item"] = self.item
            if self.ids:
                data["ids"] = list(self.ids)
        if self.kind is Kind.SWITCH:
            data["enabled"] = self.enabled
        if self.urgent:
            data["urgent"] = True
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Announcement | None:
        """The announcement ``text`` carries; None (and a log line) if it is none."""
        try:
            data = json.loads(text)
            kind = Kind(data["kind"])
            return cls(kind, item=str(data.get("item", "")),
                       enabled=bool(data.get("enabled", False)),
                       urgent=bool(data.get("urgent", False)),
                       ids=tuple(int(i) for i in data.get("ids", ())))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignored an announcement that is not one: %.200r", text)
            return None


def done_announcements(ids: Sequence[int]) -> list[Announcement]:
    """``ids`` as "done" announcements of at most :data:`MAX_IDS` ids each."""
    return [Announcement.done(ids[start:start + MAX_IDS])
            for start in range(0, len(ids), MAX_IDS)]


AnnouncementCallback = Callable[[Announcement], object]


class Bell(Protocol):
    """The other processes' doorbells on an SQLite file."""

    def ring(self, notes: Iterable[Announcement]) -> None: ...


class QueueAnnouncer:
    """Sends announcements: NOTIFY, in-process callbacks and SQLite doorbells."""

    def __init__(self, *, postgres: bool, doorbell: Bell | None = None) -> None:
        self.postgres = postgres
        self.doorbell = doorbell
        self._callbacks: list[AnnouncementCallback] = []
        self._lock = threading.Lock()

    def add_callback(self, callback: AnnouncementCallback) -> None:
        with self._lock:
            self._callbacks = [*self._callbacks, callback]

    def remove_callback(self, callback: AnnouncementCallback) -> None:
        with self._lock:
            self._callbacks = [c for c in self._callbacks if c != callback]

    def notify(self, conn: Connection, news: Iterable[Announcement]) -> None:
        """Inside a transaction: NOTIFY (PostgreSQL), sent once it commits."""
        if self.postgres:
            from sqlalchemy import func, select

            for note in _unique(news):
                conn.execute(select(func.pg_notify(note.channel, note.to_json())))

    def call_back(self, news: Iterable[Announcement]) -> None:
        """After the commit: ring the doorbells and run the callbacks; never fails."""
        notes = _unique(news)
        if not notes:
            return
        if self.doorbell is not None:
            self.doorbell.ring(notes)
        self.deliver(notes)

    def deliver(self, notes: Iterable[Announcement]) -> None:
        """Run this process's callbacks for ``notes``."""
        callbacks = self._callbacks  # replaced, never changed in place
        for note in notes:
            for callback in callbacks:
                try:
                    callback(note)
                except Exception:  # a wake-up must never fail a commit
                    log.exception("announcement callback failed for %s", note)


def _unique(news: Iterable[Announcement]) -> list[Announcement]:
    return list(dict.fromkeys(news))


class QueueListener:
    """A thread that LISTENs on both channels and calls ``on_note`` with what it hears."""

    def __init__(self, engine: Engine, on_note: AnnouncementCallback, *,
                 on_reconnect: Callable[[], object] | None = None,
                 timeout: float = LISTEN_TIMEOUT) -> None:
        self.engine = engine
        self.on_note = on_note
        self.on_reconnect = on_reconnect
        self.timeout = timeout
        self.connected = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="queue-listener")
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening; waits up to ``timeout`` seconds."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            conn: Any = None
            try:
                conn = self._connect()
                self.connected.set()
                if self.on_reconnect is not None:
                    self.on_reconnect()
                while not self._stop.is_set():
                    for raw in conn.notifies(timeout=self.timeout):
                        note = Announcement.from_json(raw.payload)
                        if note is not None:
                            self.on_note(note)
            except Exception as exc:  # the listener must outlive the database
                self.connected.clear()
                log.warning("queue listener lost its connection (%s); polling until it is "
                            "back, next try in %.0f s", exc, RECONNECT_DELAY)
                self._stop.wait(RECONNECT_DELAY)
            finally:
                if conn is not None:
                    _close(conn)

    def _connect(self) -> Any:
        """A detached autocommit psycopg connection, LISTENing."""
        raw = self.engine.raw_connection()
        conn: Any = raw.driver_connection
        raw.detach()
        try:
            conn.rollback()  # the pool's pre-ping may have opened a transaction
            conn.autocommit = True
            conn.execute(f"LISTEN {QUEUE_CHANNEL}")
            conn.execute(f"LISTEN {DONE_CHANNEL}")
        except BaseException:
            _close(conn)
            raise
        return conn


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        pass
