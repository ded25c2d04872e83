"""The production's life in the event log, as a daemon writes it (docs/operating.md, "The
production's life"): its start and stop and why, reloads applied or refused, items
restarted or failing to start, dead daemons found and what came back from them, leases
taken and lost (leadership). Every row carries the daemon's id in ``job`` and a
:class:`~engine.store.eventlog.LifeStep` as its ``source_method``; ``encore log
--lifecycle`` and the portal's lifecycle filter select them.
"""
from __future__ import annotations

import logging

from engine.eventsink import EventSink
from engine.store.eventlog import LifeStep

__all__ = ["LifeStep", "LifecycleLog", "leases_text"]

log = logging.getLogger(__name__)

SOURCE_CLASS = "Daemon"  # the source class of a daemon's own events


class LifecycleLog:
    """Writes the lifecycle events of daemon ``daemon_id`` to ``events``. A row that cannot
    be written (the database is down, at a start that fails) is logged and dropped: the
    daemon's life never waits on its record."""

    def __init__(self, events: EventSink, daemon_id: str) -> None:
        self.events = events
        self.daemon_id = daemon_id

    def write(self, type_: str, step: LifeStep, text: str, *,
              item: str | None = None) -> None:
        """One event of type ``type_`` (``Info``, ``Warning``, ``Error``) at ``step``, of
        ``item`` where it applies."""
        try:  # the event log also logs it
            self.events.write(type_, text, config_name=item, job=self.daemon_id,
                              source_class=SOURCE_CLASS, source_method=str(step))
        except Exception as exc:  # the record must not stop the daemon
            log.error("%s (not in the event log: %s)", text, exc)

    def lease(self, name: str, took: bool, *, record: bool) -> None:
        """The daemon took (``took``) or lost lease ``name``: an event when ``record`` (the
        leader lease: leadership), else a line of the log (a FIFO item's lease changes hands
        at every start, restart and reload of its daemons)."""
        if took:
            text = f"daemon {self.daemon_id} took lease {name}"
        else:
            text = f"daemon {self.daemon_id} lost lease {name} to another daemon"
        if record:
            self.write("Info" if took else "Warning", LifeStep.LEAD, text)
        else:
            log.log(logging.INFO if took else logging.WARNING, "%s", text)

def leases_text(names: list[str]) -> str:
    """``, its leases released: a, b`` (nothing when there were none)."""
    return f", its leases released: {', '.join(names)}" if names else ""
