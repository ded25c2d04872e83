"""Business services: sending into a real production, the targets restriction, load-time
checks of call_interval / schedule / targets, and call() on a virtual clock."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from engine.clock import VirtualClock
from engine.config.production import ProductionConfig, parse_production
from engine.delivery.worker import MessageWorker
from engine.errors import ConfigurationError, EncoreError, MessageError
from engine.host import BusinessOperation
from engine.retry import ReplyCodeActions, RetryPolicy
from engine.service import BusinessService, CallFailed, CallTimedOut, parse_schedule
from engine.store import queries
from engine.store.sql import SqlStore
from tests.claiming import claim_one
from tests.unit.sample_ops import Ping

PRODUCTION = """
[production]
name = "ServiceTest"

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"

[[items]]
name = "Other"
class = "tests.unit.sample_ops:EchoOperation"

[[items]]
name = "Refuser"
class = "tests.unit.test_service:RefuseOperation"
[items.settings]
failure_timeout = 0

[[items]]
name = "Poller"
class = "tests.unit.test_service:PingService"
[items.settings]
{settings}
"""


class PingService(BusinessService):
    """Sends one Ping to Echo per call."""

    def on_process_input(self) -> None:
        self.send("Echo", Ping(text="tick"))


class RefuseOperation(BusinessOperation):
    """Fails every attempt (with failure_timeout = 0: gives up at once)."""

    def on_message(self, request: Any) -> Any:
        raise ValueError("no thanks")


class DeliveringClock(VirtualClock):
    """A virtual clock on which every sleep first lets a worker deliver what is queued, so
    ``call()`` finds its response without threads or real time."""

    def __init__(self) -> None:
        super().__init__()
        self.deliver: Callable[[], None] = lambda: None

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        self.deliver()
        return super().sleep(seconds, stop)


def production_with(settings: str = "") -> ProductionConfig:
    return parse_production(PRODUCTION.format(settings=settings), env={})


def make_service(store: SqlStore, production: ProductionConfig,
                 clock: VirtualClock | None = None) -> BusinessService:
    item = production.item("Poller")
    return item.cls(item.name, item.settings, store=store, production=production,
                    clock=clock or VirtualClock())


def deliver_all(store: SqlStore, production: ProductionConfig, clock: VirtualClock) -> None:
    """Deliver every queued message of every operation item, once."""
    for item in production.items:
        if not issubclass(item.cls, BusinessOperation):
            continue
        host = item.cls(item.name, item.settings, events=store.events)
        worker = MessageWorker(host, store=store, clock=clock,
                               policy=RetryPolicy.from_settings(item.settings),
                               reply_codes=ReplyCodeActions.parse(
                                   item.settings["reply_code_actions"]),
                               requeue=False, trace=False)
        while (row := claim_one(store, item.name, owner="test", now=clock.now(),
                                       lease_seconds=60)) is not None:
            worker.deliver(row)


# -- send ------------------------------------------------------------------------------------
def test_send_enqueues_a_request_with_the_service_as_source_in_a_new_session(
        store: SqlStore) -> None:
    production = production_with()
    clock = VirtualClock()
    service = make_service(store, production, clock)

    first = service.send("Echo", Ping(text="a"))
    second = service.send("Echo", {"text": "b", "count": 2})
    third = service.send("Echo", '{"text": "c"}')

    rows = [store.get_message(i) for i in (first, second, third)]
    assert all(r is not None for r in rows)
    assert [r.source for r in rows] == ["Poller"] * 3  # type: ignore[union-attr]
    assert [r.target for r in rows] == ["Echo"] * 3  # type: ignore[union-attr]
    assert [r.status for r in rows] == ["Queued"] * 3  # type: ignore[union-attr]
    assert [r.session_id for r in rows] == [first, second, third]  # type: ignore[union-attr]
    assert rows[0].body_class == "tests.unit.sample_ops:Ping"  # type: ignore[union-attr]
    assert rows[0].time_created == clock.now()  # type: ignore[union-attr]


def test_on_process_input_of_a_subclass_sends_through_the_production(store: SqlStore) -> None:
    service = make_service(store, production_with())

    service.on_process_input()

    assert [(m["source"], m["target"]) for m in queries.messages(store)] == [("Poller", "Echo")]


@pytest.mark.parametrize("body", [
    '{"txt": "misspelt field"}',  # unknown field
    '{"count": 3}',  # missing required field
    '{"text": 5}',  # wrong type
    "not json",  # not JSON at all
])
def test_a_bad_body_is_refused_and_nothing_is_enqueued(store: SqlStore, body: str) -> None:
    service = make_service(store, production_with())

    with pytest.raises(MessageError):
        service.send("Echo", body)

    assert queries.messages(store) == []


def test_sending_to_an_unknown_item_is_refused(store: SqlStore) -> None:
    service = make_service(store, production_with())

    with pytest.raises(MessageError, match="Nowhere"):
        service.send("Nowhere", {"text": "x"})
    assert queries.messages(store) == []


def test_targets_restricts_where_the_service_may_send(store: SqlStore) -> None:
    service = make_service(store, production_with('targets = ["Echo"]'))

    service.send("Echo", {"text": "allowed"})
    with pytest.raises(MessageError, match="may not send to 'Other'.*allows Echo"):
        service.send("Other", {"text": "refused"})

    assert [m["target"] for m in queries.messages(store)] == ["Echo"]


def test_empty_targets_allows_any_item(store: SqlStore) -> None:
    service = make_service(store, production_with("targets = []"))

    service.send("Echo", {"text": "a"})
    service.send("Other", {"text": "b"})

    assert sorted(m["target"] for m in queries.messages(store)) == ["Echo", "Other"]


def test_targets_naming_an_unknown_item_is_refused_when_the_service_is_built(
        store: SqlStore) -> None:
    production = production_with('targets = ["Echo", "Ecoh"]')

    with pytest.raises(ConfigurationError, match="item 'Poller', setting 'targets'.*'Ecoh'"):
        make_service(store, production)


def test_a_service_without_a_store_cannot_send() -> None:
    service = PingService("Loose", {"targets": []})

    with pytest.raises(EncoreError, match="not attached to a production"):
        service.send("Echo", {"text": "x"})


def test_the_default_on_process_input_explains_what_to_implement() -> None:
    class Lazy(BusinessService):
        pass

    with pytest.raises(NotImplementedError, match="Lazy.*must implement on_process_input"):
        Lazy("Lazy", {}).on_process_input()


# -- call ------------------------------------------------------------------------------------
def test_call_returns_the_decoded_response(store: SqlStore) -> None:
    production = production_with()
    clock = DeliveringClock()
    clock.deliver = lambda: deliver_all(store, production, clock)
    service = make_service(store, production, clock)

    response = service.call("Echo", Ping(text="hello", count=3), timeout=5)

    assert response == Ping(text="HELLO", count=3)


def test_call_raises_with_the_error_text_when_the_message_ends_in_error(
        store: SqlStore) -> None:
    production = production_with()
    clock = DeliveringClock()
    clock.deliver = lambda: deliver_all(store, production, clock)
    service = make_service(store, production, clock)

    with pytest.raises(CallFailed, match="ended Error: .*no thanks") as caught:
        service.call("Refuser", {"any": "thing"}, timeout=5)

    assert caught.value.status == "Error"
    assert isinstance(caught.value, EncoreError)


def test_call_times_out_on_the_clock_and_leaves_the_message_queued(store: SqlStore) -> None:
    clock = VirtualClock()  # nothing delivers
    service = make_service(store, production_with(), clock)

    with pytest.raises(CallTimedOut, match="not finished after 2 s") as caught:
        service.call("Echo", {"text": "x"}, timeout=2)

    assert caught.value.status == "Queued"
    assert clock.monotonic() == pytest.approx(2.0)


# -- settings --------------------------------------------------------------------------------
def test_defaults_are_a_five_second_interval_no_schedule_and_any_target() -> None:
    settings = production_with().item("Poller").settings

    assert (settings["call_interval"], settings["schedule"], settings["targets"]) == (5.0, "", [])


@pytest.mark.parametrize("line, fragment", [
    ('schedule = "every 5 minutes"', "expected 5 fields"),  # not cron at all
    ('schedule = "*/5 * * *"', "expected 5 fields"),  # a field short
    ('schedule = "61 * * * *"', "61"),  # minute out of range
    ('schedule = "0 9 * * 8"', "0-7"),  # no day 8
    ('schedule = "0 9 * * 5-1"', "backwards"),  # reversed range
])
def test_a_bad_schedule_is_refused_at_load_time_naming_the_setting(line: str,
                                                                   fragment: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        production_with(line)

    text = str(caught.value)
    assert "item 'Poller', setting 'schedule'" in text
    assert fragment in text
    assert 'e.g. schedule = "*/5 * * * *"' in text


@pytest.mark.parametrize("line", [
    "call_interval = 0",  # zero would spin
    "call_interval = -1",  # negative
    'call_interval = "5"',  # a string
])
def test_a_bad_call_interval_is_refused_at_load_time(line: str) -> None:
    with pytest.raises(ConfigurationError, match="item 'Poller', setting 'call_interval'"):
        production_with(line)


def test_targets_must_be_a_list_of_names() -> None:
    with pytest.raises(ConfigurationError, match="setting 'targets'.*list of item names"):
        production_with("targets = [1, 2]")


def test_ensemble_spellings_are_accepted() -> None:
    settings = production_with('CallInterval = 2.5\nSchedule = "0  9 * * 1-5"').item(
        "Poller").settings

    assert settings["call_interval"] == 2.5
    assert settings["schedule"] == "0 9 * * 1-5"  # whitespace normalised


@pytest.mark.parametrize("dow, expected", [
    ("1", "mon"),  # crontab 1 = Monday (APScheduler 3 would read Tuesday)
    ("0", "sun"),  # 0 = Sunday
    ("7", "sun"),  # 7 = Sunday too
    ("1-5", "mon,tue,wed,thu,fri"),  # working days
    ("0,6", "sun,sat"),  # weekend
    ("*/2", "sun,tue,thu,sat"),  # every other day from Sunday
    ("mon-fri", "mon,tue,wed,thu,fri"),  # names pass through
    ("0-6", "*"),  # every day
])
def test_day_of_week_follows_crontab_numbering(dow: str, expected: str) -> None:
    trigger = parse_schedule(f"0 9 * * {dow}")

    assert str(trigger.fields[4]) == expected
