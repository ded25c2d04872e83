"""An adapter that cannot start (a WSDL that is down) and the event log, on a virtual clock
(docs/security.md): one Error at the first failure, at most one reminder Warning every ten
minutes while it keeps failing, one Info when it starts — and a try every retry_interval."""
from __future__ import annotations

from typing import Any

from engine.clock import VirtualClock
from engine.config.production import parse_production
from engine.delivery.item import ItemContext, ItemRunner
from engine.delivery.readiness import NOT_READY_REMINDER_INTERVAL
from engine.errors import AdapterNotReady
from engine.store.sql import SqlStore

RETRY_INTERVAL = 5  # seconds between two tries to start the adapter
OUTAGE = 1800  # seconds the WSDL stays down: three reminder periods
PRODUCTION = f"""
[[items]]
name = "Payments"
class = "tests.unit.sample_ops:StubOperation"
[items.settings]
retry_interval = {RETRY_INTERVAL}
"""


class Recorder:
    """An event sink that keeps (virtual time, type, text)."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.events: list[tuple[float, str, str]] = []

    def write(self, type_: str, text: str, **context: Any) -> None:
        assert context["config_name"] == "Payments"
        self.events.append((self.clock.monotonic(), type_, text))


class Wsdl:
    """Stands in for the adapter's transport opening: fails while ``down``."""

    def __init__(self) -> None:
        self.down = True
        self.tries = 0

    def open(self) -> None:
        self.tries += 1
        if self.down:
            raise AdapterNotReady("WSDL http://bank.example/?wsdl: HTTP 503")


def runner_on_a_virtual_clock(store: SqlStore) -> tuple[ItemRunner, VirtualClock, Recorder, Wsdl]:
    clock = VirtualClock()
    events, wsdl = Recorder(clock), Wsdl()
    item = parse_production(PRODUCTION, env={}).item("Payments")
    runner = ItemRunner(item, ItemContext(store=store, clock=clock, owner="d", lease_seconds=30,
                                          poll_interval=0.5, events=events))
    runner.adapter._open = wsdl.open  # type: ignore[union-attr, method-assign]
    return runner, clock, events, wsdl


def run_until(runner: ItemRunner, clock: VirtualClock, end: int) -> list[bool]:
    """Ask the runner whether it may claim once a second, as an idle dispatcher does."""
    answers = []
    for t in range(int(clock.monotonic()), end + 1):
        clock.advance_to(t)
        answers.append(runner._try_start_adapter())
    return answers


def test_a_wsdl_down_for_half_an_hour_writes_one_error_three_reminders_and_one_info(
        store: SqlStore) -> None:
    runner, clock, events, wsdl = runner_on_a_virtual_clock(store)
    assert not any(run_until(runner, clock, OUTAGE))
    wsdl.down = False
    assert run_until(runner, clock, OUTAGE + RETRY_INTERVAL)[-1] is True
    assert [(t, kind) for t, kind, _ in events.events] == [
        (0, "Error"), (600, "Warning"), (1200, "Warning"), (1800, "Warning"),
        (OUTAGE + RETRY_INTERVAL, "Info")]
    assert wsdl.tries == OUTAGE // RETRY_INTERVAL + 2  # one try every retry_interval
    error, reminder, info = events.events[0][2], events.events[1][2], events.events[-1][2]
    assert "not ready" in error and "HTTP 503" in error and "every 5 s" in error
    assert "still not ready after 10 min" in reminder and "121 tries" in reminder
    assert "ready after 30 min (362 tries)" in info


def test_reminders_are_never_closer_than_the_reminder_interval(store: SqlStore) -> None:
    runner, clock, events, _ = runner_on_a_virtual_clock(store)
    runner.retry_interval = 7  # tries that do not fall on the ten-minute marks
    runner._readiness.retry_interval = 7
    run_until(runner, clock, 3 * 3600)
    times = [t for t, _, _ in events.events]
    assert [kind for _, kind, _ in events.events] == ["Error"] + ["Warning"] * (len(times) - 1)
    assert len(times) == 18  # 3 hours: the Error and 17 reminders, each 602 s or more apart
    assert all(b - a >= NOT_READY_REMINDER_INTERVAL for a, b in zip(times, times[1:]))


def test_an_adapter_that_starts_at_once_writes_no_event(store: SqlStore) -> None:
    runner, clock, events, wsdl = runner_on_a_virtual_clock(store)
    wsdl.down = False
    assert run_until(runner, clock, 60) == [True] * 61
    assert events.events == [] and wsdl.tries == 1
