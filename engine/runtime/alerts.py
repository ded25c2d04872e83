"""Alerts: ``Alert`` events, also sent to the production's ``alert_item`` when one is set
(docs/architecture.md)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from engine.config.production import ProductionConfig
from engine.errors import EncoreError
from engine.message import JsonMessage
from engine.store.eventlog import SqlEventLog
from engine.store.sql import SqlStore

log = logging.getLogger(__name__)

REARM_FRACTION = 0.8  # an alert re-arms once the value is below 80 % of its threshold


class AlertingEventLog:
    """An event sink that writes to SQL and forwards ``Alert`` events to the alert item."""

    def __init__(self, events: SqlEventLog, store: SqlStore, production: ProductionConfig) -> None:
        self.events = events
        self.store = store
        self.production = production

    def write(self, type_: str, text: str, **context: Any) -> None:
        self.events.write(type_, text, **context)
        target = self.production.alert_item
        if type_ != "Alert" or not target or context.get("config_name") == target:
            return
        alert = {"item": context.get("config_name"), "text": text,
                 "message_id": context.get("message_id")}
        try:
            from engine.client import send_message

            send_message(self.store, self.production, target, alert_body(self.production,
                                                                         target, alert),
                         source=context.get("config_name") or "alerts")
        except EncoreError as exc:
            log.error("could not send the alert to item %s: %s", target, exc)


def alert_body(production: ProductionConfig, target: str, alert: dict[str, Any]) -> Any:
    """The alert as the alert item's request: a webhook POST for HTTP items, else the alert."""
    cls = getattr(production.item(target).cls, "request_class", JsonMessage)
    if cls.__name__ == "HttpRequest":
        return {"method": "POST", "path": "/", "json": alert}
    return alert


@dataclass
class ThresholdAlarm:
    """Fires once when ``value`` reaches ``threshold``; re-arms below 80 % of it."""

    threshold: float
    armed: bool = field(default=True)

    def crossed(self, value: float) -> bool:
        if self.threshold <= 0:
            return False
        if self.armed and value >= self.threshold:
            self.armed = False
            return True
        if not self.armed and value < self.threshold * REARM_FRACTION:
            self.armed = True
        return False
