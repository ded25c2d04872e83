"""Which announcement goes to which item runner (docs/architecture.md, docs/scale-out.md).

Work committed for an item, by this process or any other — LISTEN/NOTIFY on PostgreSQL, the
doorbell of an SQLite file (:meth:`~engine.store.sql.SqlStore.hear_other_processes`) — is
announced (:mod:`engine.store.notify`). The :class:`AnnouncementRouter` hands each
announcement to the runner of its item: new work wakes the item's dispatcher, an operator's
switch turns it on or off, a breaker opened or closed by another daemon makes the item's
breaker look again. An admin's Reload and an operator's restart of an item go to the
daemon's reloader; completions are for those who wait for them (the store's completion
hub), and a reload's announcement for the portals.
"""
from __future__ import annotations

import collections
from collections.abc import Callable, Mapping

from engine.delivery.item import ItemRunner
from engine.store.notify import Announcement, Kind
from engine.store.sql import SqlStore

HEARD_CONTROLS = 64  # the reloads and restarts remembered, to hear each one once


class AnnouncementRouter:
    """Routes the announcements of ``store`` to ``runners`` (the daemon's, by item name);
    ``reload()`` and ``restart(name)`` ask the daemon's reloader for a reload, a restart."""

    def __init__(self, store: SqlStore, runners: Mapping[str, ItemRunner], *,
                 reload: Callable[[], None], restart: Callable[[str], None]) -> None:
        self.store = store
        self.runners = runners
        self.reload = reload
        self.restart = restart
        self._heard_controls: collections.deque[tuple[int, ...]] = \
            collections.deque(maxlen=HEARD_CONTROLS)

    def listen(self, *, others: bool) -> None:
        """Hear the announcements of this process; ``others``: those of every other process
        too (not inline: that needs a listener thread)."""
        self.store.add_queue_callback(self.hear)
        self.store.add_reconnect_hook(self.wake_all)
        if others:
            self.store.hear_other_processes()

    def stop_listening(self, *, others: bool) -> None:
        """Undo :meth:`listen` (with the same ``others``)."""
        self.store.remove_queue_callback(self.hear)
        self.store.remove_reconnect_hook(self.wake_all)
        if others:
            self.store.stop_hearing()

    def hear(self, note: Announcement) -> None:
        """Hand ``note`` to whom it is for."""
        if note.kind is Kind.DONE or note.kind is Kind.RELOADED:
            return  # for the waiters (the store's completion hub), for the portals
        if note.kind in (Kind.RELOAD, Kind.RESTART):
            if note.ids in self._heard_controls:
                return  # heard twice (PostgreSQL: our own callback, then our NOTIFY)
            self._heard_controls.append(note.ids)
        if note.kind is Kind.RELOAD:  # an admin's Reload in the portal: as SIGHUP
            self.reload()
            return
        if note.kind is Kind.RESTART:
            if note.item in self.runners:
                self.restart(note.item)
            return
        runner = self.runners.get(note.item)
        if runner is None:
            return
        if note.kind is Kind.SWITCH:
            runner.dispatcher.switch(note.enabled)
            return
        if note.kind is Kind.BREAKER:
            runner.guards.changed_elsewhere()  # and the item's dispatcher looks again
        runner.dispatcher.announce(urgent=note.urgent)

    def wake_all(self) -> None:
        """The database connection came back: every item looks at its queue now (what was
        announced meanwhile was not heard)."""
        for runner in list(self.runners.values()):
            runner.wakeup.set()
