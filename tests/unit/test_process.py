"""Business processes on a virtual clock: sync and async calls, sessions and sources,
timeouts, a target's failure, re-attaching after an interrupted attempt."""
from __future__ import annotations

import threading
from typing import Any

import pytest

from engine.cli.trace import trace_lines
from engine.clock import VirtualClock
from engine.config.production import ProductionConfig, parse_production
from engine.delivery.worker import MessageWorker
from engine.errors import HttpStatusError, Interrupted, ProcessError
from engine.process import BusinessProcess, ProcessContext
from engine.store import queries
from engine.store.sql import SqlStore
from engine.testing import StubCall, VirtualDaemon
from tests.claiming import claim_one

QUOTE_SECONDS = 2.0  # virtual seconds Quote takes to answer
TAX_SECONDS = 3.0  # virtual seconds Tax takes to answer

PRODUCTION = """
[[items]]
name = "Shop"
class = "tests.unit.sample_processes:{process}"
{process_settings}
[[items]]
name = "Quote"
class = "tests.unit.sample_ops:StubOperation"
[[items]]
name = "Tax"
class = "tests.unit.sample_ops:StubOperation"
[[items]]
name = "Slow"
class = "tests.unit.sample_ops:StubOperation"
[items.settings]
response_timeout = 60
"""


def production(process: str, **settings: Any) -> ProductionConfig:
    lines = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in settings.items())
    text = PRODUCTION.format(process=process,
                             process_settings=f"[items.settings]\n{lines}" if lines else "")
    return parse_production(text, env={})


def answer_after(vd: VirtualDaemon, seconds: float, answer: Any) -> Any:
    """A stub script: the service takes ``seconds`` of virtual time, then ``answer``."""
    def script(call: StubCall) -> Any:
        vd.clock.advance(seconds)
        return answer(call.payload) if callable(answer) else answer
    return script


def shop(store: SqlStore, process: str = "QuoteAndTax", **settings: Any) -> VirtualDaemon:
    vd = VirtualDaemon(production(process, **settings), store)
    vd.hosts["Quote"].adapter.script = answer_after(vd, QUOTE_SECONDS, {"price": 100})
    vd.hosts["Tax"].adapter.script = answer_after(
        vd, TAX_SECONDS, lambda payload: {"tax": payload["price"] * 0.23})
    return vd


def offset(vd: VirtualDaemon, moment: Any) -> float:
    return round((moment - vd.clock.start).total_seconds(), 6)


def test_a_process_calling_two_operations_in_turn_answers_with_their_combined_result(
        store: SqlStore) -> None:
    vd = shop(store)
    mid = vd.send("Shop", {"item": "lamp"})
    vd.run()
    row = store.get_message(mid)
    assert row.status == "Completed"
    response = store.get_message(row.corresponding_id)
    assert response.body == '{"item":"lamp","price":100,"tax":23.0}'
    assert (response.source, response.target) == ("Shop", "cli")
    # Tax is asked only once Quote has answered: the calls are in turn, not at once
    quote_call, = vd.hosts["Quote"].adapter.calls
    tax_call, = vd.hosts["Tax"].adapter.calls
    assert quote_call.started == 0 and tax_call.started == QUOTE_SECONDS
    assert offset(vd, row.time_completed) == QUOTE_SECONDS + TAX_SECONDS


def test_every_hop_carries_the_session_and_names_its_source(store: SqlStore) -> None:
    vd = shop(store)
    mid = vd.send("Shop", {"item": "lamp"})
    vd.run()
    hops = [(m["kind"], m["source"], m["target"], m["session_id"])
            for m in queries.messages(store, session_id=mid)]
    assert sorted(hops) == sorted([
        ("request", "cli", "Shop", mid), ("request", "Shop", "Quote", mid),
        ("response", "Quote", "Shop", mid), ("request", "Shop", "Tax", mid),
        ("response", "Tax", "Shop", mid), ("response", "Shop", "cli", mid)])


def test_async_calls_enqueue_and_return_the_ids_without_waiting(store: SqlStore) -> None:
    vd = shop(store, "FireAndForget")
    mid = vd.send("Shop", {"item": "lamp"})
    vd.daemon.runners["Shop"].step()  # the process alone
    assert [m for m, _ in vd.deliveries] == [mid]
    response = store.get_message(store.get_message(mid).corresponding_id)
    ids = queries.messages(store, session_id=mid)
    sent = {m["target"]: m["id"] for m in ids if m["kind"] == "request" and m["source"] == "Shop"}
    assert response.body == f'{{"quote":{sent["Quote"]},"tax":{sent["Tax"]}}}'
    assert {store.get_message(i).status for i in sent.values()} == {"Queued"}
    assert vd.clock.monotonic() == 0  # nothing waited
    vd.run()
    assert {store.get_message(i).status for i in sent.values()} == {"Completed"}


def test_a_sync_call_gives_up_after_its_timeout_and_the_target_message_goes_on(
        store: SqlStore) -> None:
    vd = shop(store, "Impatient")
    vd.hosts["Slow"].adapter.script = answer_after(vd, 8, {"late": True})
    mid = vd.send("Shop", {"timeout": 5})
    vd.run()
    row = store.get_message(mid)
    assert row.status == "Error"
    assert "CallTimedOut: message" in row.error_text
    assert "to 'Slow' not finished after 5 s" in row.error_text
    slow = [m for m in queries.messages(store, session_id=mid) if m["target"] == "Slow"]
    assert [m["status"] for m in slow] == ["Completed"]
    assert offset(vd, slow[0]["time_completed"]) == 8


def test_a_sync_call_nobody_answers_raises_at_its_timeout_exactly(store: SqlStore) -> None:
    vd = shop(store, "Impatient")
    # an operator switched Slow off: its message stays queued
    store.set_item_enabled("Slow", False, reason="nobody answers", now=vd.clock.now())
    mid = vd.send("Shop", {"timeout": 5})
    vd.run_until(60)
    row = store.get_message(mid)
    assert row.status == "Error" and "not finished after 5 s" in row.error_text
    assert offset(vd, row.time_completed) == 5


def test_a_target_that_ends_in_error_makes_the_sync_call_raise_its_error_text(
        store: SqlStore) -> None:
    vd = shop(store)
    vd.hosts["Tax"].adapter.script = [HttpStatusError("HTTP 500: tax service down",
                                                          status_code=500)]
    mid = vd.send("Shop", {"item": "lamp"})
    vd.run()
    row = store.get_message(mid)
    tax = next(m for m in queries.messages(store, session_id=mid) if m["target"] == "Tax")
    assert tax["status"] == "Error"
    assert row.status == "Error"
    assert f"message {tax['id']} to 'Tax' ended Error" in row.error_text
    assert "HTTP 500: tax service down" in row.error_text
    assert len(vd.hosts["Quote"].adapter.calls) == 1  # not retried under E=F


def test_a_retried_process_sends_fresh_requests(store: SqlStore) -> None:
    vd = shop(store, reply_code_actions="E#CallFailed=R", retry_interval=10,
                  failure_timeout=30)
    vd.hosts["Tax"].adapter.script = [HttpStatusError("HTTP 500", status_code=500),
                                          {"tax": 1}]
    mid = vd.send("Shop", {"item": "lamp"})
    vd.run()
    row = store.get_message(mid)
    assert row.status == "Completed" and row.attempts == 2
    taxes = [m["status"] for m in queries.messages(store, session_id=mid)
             if m["target"] == "Tax" and m["kind"] == "request"]
    assert taxes == ["Error", "Completed"]


def test_a_process_may_not_wait_for_its_own_queue(store: SqlStore) -> None:
    vd = shop(store, "CallsItself")
    mid = vd.send("Shop", {"x": 1})
    vd.run()
    row = store.get_message(mid)
    assert row.status == "Error" and "cannot wait for a message to itself" in row.error_text


def test_a_process_that_is_not_bound_says_so(store: SqlStore) -> None:
    prod = production("QuoteAndTax")
    item = prod.item("Shop")
    host = item.cls("Shop", item.settings)
    with pytest.raises(ProcessError, match="not bound to a production"):
        host.send_request_async("Quote", {"item": "x"})


def test_processes_retry_for_ever_by_default_but_fail_at_once_under_e_equals_f() -> None:
    settings = production("QuoteAndTax").item("Shop").settings
    assert settings["failure_timeout"] == -1
    assert settings["reply_code_actions"] == "E=F"


def test_a_stop_interrupts_a_waiting_call_and_the_next_run_re_attaches_to_its_request(
        store: SqlStore) -> None:
    prod = production("QuoteAndTax")
    vd = VirtualDaemon(prod, store)
    vd.hosts["Quote"].adapter.script = answer_after(vd, 1, {"price": 10})
    vd.hosts["Tax"].adapter.script = answer_after(vd, 1, {"tax": 2})
    mid = vd.send("Shop", {"item": "lamp"})
    # The Shop worker waits while nobody delivers Quote, and the daemon stops meanwhile.
    stopping = StoppingContext(store, prod, vd)
    host = vd.hosts["Shop"]
    assert isinstance(host, BusinessProcess)
    host.bind(stopping.context)
    worker = MessageWorker.from_settings(host, prod.item("Shop").settings, store=store,
                                         clock=stopping.clock)
    row = claim_one(store, "Shop", owner="d1", now=vd.clock.now(), lease_seconds=60)
    with pytest.raises(Interrupted):
        worker.deliver(row)
    store.release(row.id, token=row.claim_token)  # what the item runner does
    # The next daemon runs the process again: it waits for the same Quote message.
    host.bind(ProcessContext(store=store, production=lambda: prod, clock=vd.clock,
                             stop=vd.daemon.runners["Shop"].stop_event))
    vd.run()
    row = store.get_message(mid)
    assert row.status == "Completed" and row.attempts == 2
    quotes = [m for m in queries.messages(store, session_id=mid)
              if m["target"] == "Quote" and m["kind"] == "request"]
    assert len(quotes) == 1 and len(vd.hosts["Quote"].adapter.calls) == 1
    infos = [e["text"] for e in queries.events(store, queries.EventFilter(type="Info"))]
    assert any(f"re-attached to message {quotes[0]['id']} for Quote" in t for t in infos)


class StoppingContext:
    """A context whose clock sets the stop event at the first poll (the daemon stops while
    the process waits)."""

    def __init__(self, store: SqlStore, prod: ProductionConfig, vd: VirtualDaemon
                 ) -> None:
        stop = threading.Event()

        class Clock(VirtualClock):
            def sleep(self, seconds: float, event: threading.Event | None = None) -> bool:
                stop.set()
                return super().sleep(seconds, event)

        self.clock = Clock(vd.clock.start)
        self.context = ProcessContext(store=store, production=lambda: prod, clock=self.clock,
                                      stop=stop)


def test_the_trace_of_a_session_lays_out_every_hop_in_time_order(store: SqlStore) -> None:
    vd = shop(store)
    mid = vd.send("Shop", {"item": "lamp"})
    vd.run()
    lines = trace_lines(store, mid)
    assert lines[0] == f"session {mid}: cli -> Shop, Shop -> Quote, Shop -> Tax"
    body = [line.split("s  ", 1)[1] for line in lines[1:]]
    quote, tax = mid + 1, mid + 3
    assert body == [
        f"message {mid} (request) cli -> Shop created",
        f"  attempt 1 of message {mid} began on Shop",  # its own work: no server
        f"  message {quote} (request) Shop -> Quote created",
        f"    attempt 1 of message {quote} sent to stub",
        f"    attempt 1 of message {quote} ended after 2.000 s: ok",
        f"  message {quote} Completed",
        f"  message {quote + 1} (response) Quote -> Shop created",
        f"  message {tax} (request) Shop -> Tax created",
        f"    attempt 1 of message {tax} sent to stub",
        # the process sees Tax's answer the moment Tax's delivery ends: at the same time,
        # which lists it first (lines at one time go by message id)
        f"  attempt 1 of message {mid} ended after 5.000 s: ok",
        f"message {mid} Completed",
        f"    attempt 1 of message {tax} ended after 3.000 s: ok",
        f"  message {tax} Completed",
        f"  message {tax + 1} (response) Tax -> Shop created",
        f"message {tax + 2} (response) Shop -> cli created",
    ]
    offsets = [float(line.split("s  ", 1)[0]) for line in lines[1:]]
    assert offsets == sorted(offsets) and offsets[-1] == QUOTE_SECONDS + TAX_SECONDS
    assert offsets[body.index(f"  message {tax} (request) Shop -> Tax created")] == QUOTE_SECONDS


def test_a_call_never_re_attaches_to_a_message_it_did_not_send(store: SqlStore) -> None:
    vd = shop(store)
    mid = vd.send("Shop", {"item": "lamp"})
    # someone else took the key of the process's first call (e.g. an intake client)
    squatter = store.accept(target="Quote", body_class=None, body='{"item": "fake"}',
                            source="intruder", idempotency_key=f"encore-process:{mid}:1:1").id
    vd.run()
    row = store.get_message(mid)
    assert row.status == "Completed"
    quotes = [m for m in queries.messages(store, session_id=mid) if m["target"] == "Quote"]
    assert [(m["source"], m["body"]) for m in quotes if m["kind"] == "request"] == [
        ("Shop", '{"item":"lamp"}')]
    assert squatter not in [m["id"] for m in quotes]
    warnings = [e["text"] for e in queries.events(store, queries.EventFilter(type="Warning"))]
    assert any(f"message {squatter} for Quote holds this call's key" in t for t in warnings)
