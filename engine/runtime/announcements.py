"""Which announcement goes to which item runner (docs/architecture.md, docs/scale-out.md): new work,
an operator's switch and breaker changes go to the item's runner; reloads and restarts to the
reloader."""
from __future__ import annotations

import collections
from collections.abc import Callable, Mapping

from engine.delivery.item import ItemRunner
from engine.store.notify import Announcement, Kind
from engine.store.sql import SqlStore

HEARD_CONTROLS = 64  # the reloads and restarts remembered, to hear each one once


class AnnouncementRouter:
    """Routes the announcements of ``store`` to ``runners`` (by item name)."""

    def __init__(self, store: SqlStore, runners: Mapping[str, ItemRunner], *,
                 reload: Callable[[], None], restart: Callable[[str], None]) -> None:
        self.store = store
        self.runners = runners
        self.reload = reload
        self.restart = restart
        self._heard_controls: collections.deque[tuple[int, ...]] = \
            collections.deque(maxlen=HEARD_CONTROLS)

    def listen(self, *, others: bool) -> None:
        """Hear this process's announcements; ``others``: every other process's too."""
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
            return
        if note.kind in (Kind.RELOAD, Kind.RESTART):
            if note.ids in self._heard_controls:
                return  # heard twice (PostgreSQL: our own callback, then our NOTIFY)
            self._heard_controls.append(note.ids)
        if note.kind is Kind.RELOAD:
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
            runner.guards.changed_elsewhere()
        runner.dispatcher.announce(urgent=note.urgent)

    def wake_all(self) -> None:
        """The database connection came back: every item looks at its queue now."""
        for runner in list(self.runners.values()):
            runner.wakeup.set()
