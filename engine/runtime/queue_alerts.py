"""The queue alerts of a production's items (docs/settings.md): one ``Alert`` per threshold
crossing."""
from __future__ import annotations

from collections.abc import Callable

from engine.clock import Clock
from engine.config.production import ItemConfig
from engine.eventsink import EventSink
from engine.runtime.alerts import ThresholdAlarm
from engine.runtime.scheduler import ProductionScheduler
from engine.store import queries
from engine.store.sql import SqlStore

QUEUE_ALERT_INTERVAL = 1.0  # seconds between queue-alert checks
JOB = "queue_alerts"


class QueueAlerts:
    """Watches the queues of ``items()`` that set an alert, one alarm per item and kind."""

    def __init__(self, store: SqlStore, clock: Clock, events: EventSink,
                 items: Callable[[], list[ItemConfig]]) -> None:
        self.store = store
        self.clock = clock
        self.events = events
        self.items = items
        self._alarms: dict[tuple[str, str], ThresholdAlarm] = {}

    def _watched(self) -> list[ItemConfig]:
        return [i for i in self.items() if (s := i.operation_settings) is not None
                and (s.queue_count_alert or s.queue_wait_alert)]

    def schedule(self, scheduler: ProductionScheduler) -> None:
        """Check the queue alerts every QUEUE_ALERT_INTERVAL, once an item sets one."""
        if self._watched() and not any(j.name == f"housekeeping:{JOB}"
                                       for j in scheduler.jobs):
            scheduler.add_housekeeping(JOB, QUEUE_ALERT_INTERVAL, self.check,
                                       leader_only=True)

    def check(self) -> None:
        """One Alert per crossing of ``queue_count_alert`` / ``queue_wait_alert``."""
        watched = self._watched()
        if not watched:
            return
        stats, now = queries.queue_stats(self.store), self.clock.now()
        for item in watched:
            alerts = item.operation_settings
            assert alerts is not None
            s = stats.get(item.name, {})
            depth = s.get("queued", 0)
            wait = (now - s["oldest"]).total_seconds() if s.get("oldest") else 0.0
            for kind, threshold, value, text in (
                    ("count", alerts.queue_count_alert, depth,
                     f"queue of {item.name} holds {depth} messages "
                     f"(queue_count_alert = {alerts.queue_count_alert})"),
                    ("wait", alerts.queue_wait_alert, wait,
                     f"oldest message of {item.name} has waited {wait:.0f} s "
                     f"(queue_wait_alert = {alerts.queue_wait_alert:g} s)")):
                alarm = self._alarms.setdefault((item.name, kind), ThresholdAlarm(threshold))
                if alarm.crossed(value):
                    self.events.write("Alert", text, config_name=item.name,
                                      source_class="Daemon", source_method="check_queue_alerts")
