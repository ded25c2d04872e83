"""The production's life in the event log, as a daemon writes it (docs/operating.md, "The
production's life"). Rows carry the daemon's id in ``job`` and a
:class:`~engine.store.eventlog.LifeStep` as ``source_method``."""
from __future__ import annotations

import logging

from engine.eventsink import EventSink
from engine.store.eventlog import LifeStep, SqlEventLog

__all__ = ["LifeStep", "LifecycleLog", "leases_text", "record_failed_start"]

log = logging.getLogger(__name__)

SOURCE_CLASS = "Daemon"


class LifecycleLog:
    """Writes the lifecycle events of daemon ``daemon_id``; failures are only logged."""

    def __init__(self, events: EventSink, daemon_id: str) -> None:
        self.events = events
        self.daemon_id = daemon_id

    def write(self, type_: str, step: LifeStep, text: str, *,
              item: str | None = None) -> None:
        """One event of ``type_`` at ``step``, of ``item`` where it applies."""
        try:
            self.events.write(type_, text, config_name=item, job=self.daemon_id,
                              source_class=SOURCE_CLASS, source_method=str(step))
        except Exception as exc:
            log.error("%s (not in the event log: %s)", text, exc)

    def lease(self, name: str, took: bool, *, record: bool) -> None:
        """The daemon took or lost lease ``name``: an event when ``record``, else a log line."""
        if took:
            text = f"daemon {self.daemon_id} took lease {name}"
        else:
            text = f"daemon {self.daemon_id} lost lease {name} to another daemon"
        if record:
            self.write("Info" if took else "Warning", LifeStep.LEAD, text)
        else:
            log.log(logging.INFO if took else logging.WARNING, "%s", text)


def record_failed_start(events: SqlEventLog, daemon_id: str, production: str,
                        exc: Exception) -> None:
    """One ``Error`` event for daemon ``daemon_id``'s failed start, if the database takes it."""
    try:
        events.write("Error", f"daemon {daemon_id} could not start production {production}: "
                     f"{exc}", config_name=getattr(exc, "item", None), job=daemon_id,
                     source_class=SOURCE_CLASS, source_method=LifeStep.START, echo=False)
    except Exception as write_error:
        log.debug("the failed start is not in the event log: %s", write_error)


def leases_text(names: list[str]) -> str:
    """``, its leases released: a, b`` (nothing when there were none)."""
    return f", its leases released: {', '.join(names)}" if names else ""
