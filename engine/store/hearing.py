"""What a store hears: the announcements of this process's commits, and — once asked — those
of every other process on the database (LISTEN on PostgreSQL, the doorbell of an SQLite
file), with hooks called when the listener reconnects."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from sqlalchemy import Engine

from engine.store.connector import Database, work_announcements
from engine.store.notify import AnnouncementCallback, QueueListener

log = logging.getLogger("engine.store.sql")  # the name the daemon's log filters know

LISTEN_WAIT = 5.0  # seconds hear_other_processes waits for the PostgreSQL listener to connect


class StoreHearing:
    """The announcement methods of :class:`~engine.store.sql.SqlStore`."""

    db: Database
    engine: Engine
    is_postgres: bool
    _listener: QueueListener | None
    _reconnect_hooks: list[Callable[[], object]]
    _hearing_lock: threading.Lock
    _hearers: int

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
