"""What a store hears: announcements of this process's commits and, once asked, of every
other process on the database."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from sqlalchemy import Engine

from engine.store.connector import Database, work_announcements
from engine.store.notify import AnnouncementCallback, QueueListener

log = logging.getLogger("engine.store.sql")  # the name the daemon's log filters know

LISTEN_WAIT = 5.0


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
        """Call ``callback(announcement)`` for what this process (and, once hearing, others)
        commits."""
        self.db.announcer.add_callback(callback)

    def remove_queue_callback(self, callback: AnnouncementCallback) -> None:
        self.db.announcer.remove_callback(callback)

    def add_reconnect_hook(self, hook: Callable[[], object]) -> None:
        """Call ``hook()`` whenever the listener (re)connects, as announcements were lost."""
        self._reconnect_hooks.append(hook)

    def remove_reconnect_hook(self, hook: Callable[[], object]) -> None:
        if hook in self._reconnect_hooks:
            self._reconnect_hooks.remove(hook)

    def hear_other_processes(self) -> None:
        """Hear what other processes announce, from now on, until as many
        :meth:`stop_hearing` calls or :meth:`dispose`."""
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
        listener.connected.wait(LISTEN_WAIT)

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
        """Tell idle workers of every daemon that ``targets`` may have work."""
        self.db.announce(work_announcements(targets))
