"""Alerts: threshold crossings, alert_on_error with its grace period, the alert item."""
from __future__ import annotations

from typing import Any

import pytest

from engine.config.production import parse_production
from engine.runtime.alerts import AlertingEventLog, ThresholdAlarm
from engine.store import queries
from engine.store.sql import SqlStore
from tests.unit.test_worker import SEED, Harness, simulated, stub


def test_a_threshold_alarm_fires_once_per_crossing_and_rearms_below_80_percent() -> None:
    alarm = ThresholdAlarm(10)
    values = [5, 10, 12, 9, 8.5, 12, 7, 11]
    assert [alarm.crossed(v) for v in values] == [False, True, False, False, False, False,
                                                   False, True]
    assert not any(ThresholdAlarm(0).crossed(v) for v in values)  # 0 = off


def alerts(h: Harness) -> list[str]:
    return h.events("Alert")


@pytest.mark.parametrize(("grace", "script", "expected"), [
    # no grace: the first failure alerts, even though a retry then succeeds
    (0, ["x", "x", "ok"], 1),
    # a retry succeeds within the grace period: no alert
    (25, ["x", "x", "ok"], 1 - 1),
    # still failing when the grace period is over: one alert, not one per attempt
    (15, ["x", "x", "x", "ok"], 1),
])
def test_alert_on_error_respects_the_retry_grace_period(
        store: SqlStore, grace: float, script: list[str], expected: int) -> None:
    from engine.errors import ResponseTimeout
    answers: list[Any] = [ResponseTimeout("late") if a == "x" else a for a in script]
    h = Harness(store, _stub_op(), {**SEED, "failure_timeout": 60, "alert_on_error": True,
                                     "alert_retry_grace_period": grace}, stub(answers))
    h.send()
    h.deliver_next()
    assert len(alerts(h)) == expected


def test_alert_on_error_alerts_once_when_the_message_gives_up(store: SqlStore) -> None:
    h = Harness(store, _sim_op(), {**SEED, "alert_on_error": True,
                                   "alert_retry_grace_period": 1000}, simulated(8))
    h.send()
    h.deliver_next()
    (text,) = alerts(h)
    assert "giving up" in text


def _stub_op() -> Any:
    from tests.unit.sample_ops import StubOperation
    return StubOperation


def _sim_op() -> Any:
    from engine.testing import SimulatedOperation
    return SimulatedOperation


PRODUCTION = """
[production]
alert_item = "Pager"
[[items]]
name = "Work"
class = "tests.unit.sample_ops:EchoOperation"
[items.settings]
queue_count_alert = 3
[[items]]
name = "Pager"
class = "operations.http:HttpOperation"
[items.settings]
url = "http://127.0.0.1:9/"
"""


def test_every_alert_is_also_sent_to_the_alert_item(store: SqlStore) -> None:
    production = parse_production(PRODUCTION, env={})
    sink = AlertingEventLog(store.events, store, production)
    sink.write("Alert", "disk on fire", config_name="Work", message_id=4)
    sink.write("Warning", "only a warning", config_name="Work")
    sink.write("Alert", "the pager itself fails", config_name="Pager")  # no loop
    (msg,) = queries.messages(store, item="Pager")
    assert msg["source"] == "Work"
    assert '"json":{"item":"Work","text":"disk on fire","message_id":4}' in msg["body"]


def test_queue_count_alert_fires_when_the_queue_is_deep(store: SqlStore) -> None:
    from engine.runtime.daemon import Daemon
    production = parse_production(PRODUCTION, env={})
    daemon = Daemon(production, store=store, env={})
    for _ in range(2):
        store.enqueue(target="Work", body_class=None, body='{"text": "x"}')
    daemon.check_queue_alerts()
    store.enqueue(target="Work", body_class=None, body='{"text": "x"}')
    daemon.check_queue_alerts()
    daemon.check_queue_alerts()
    (alert,) = queries.events(store, queries.EventFilter(type="Alert"))
    assert "holds 3 messages" in alert["text"] and alert["config_name"] == "Work"
    assert len(queries.messages(store, item="Pager")) == 1
