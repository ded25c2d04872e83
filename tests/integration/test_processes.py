"""Business processes and the router in a real daemon, against real loopback HTTP servers,
on SQLite and PostgreSQL (docs/processes.md): routing by rule, a process calling two operations
in turn, a sync call's timeout, a target's error, a stop while a process waits, and the
multi-hop trace through ``encore trace``."""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from engine.client import send_message, wait_for
from engine.config.production import ProductionConfig, parse_production
from engine.runtime.daemon import Daemon
from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import encore
from tests.servers import HttpTestServer, Recorded, respond
from tests.waiting import wait_until

SLOW = 1.0  # seconds the slow server takes to answer
SHORT = 0.2  # seconds a sync call waits for it
WAIT = 15  # seconds a test waits for a message at most


@contextmanager
def running(store: SqlStore, items: str) -> Iterator[tuple[Daemon, ProductionConfig]]:
    production = parse_production("[production]\npoll_interval = 0.05\n" + items, env={})
    daemon = Daemon(production, store=store, env={})
    daemon.start()
    try:
        yield daemon, production
    finally:
        daemon.stop()


def http_item(name: str, url: str, **settings: Any) -> str:
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    return (f'[[items]]\nname = "{name}"\nclass = "operations.http:HttpOperation"\n'
            f'[items.settings]\nurl = "{url}"\n{extra}')


def process_item(name: str, cls: str, settings: str = "", pool_size: int = 2) -> str:
    return (f'[[items]]\nname = "{name}"\nclass = "{cls}"\npool_size = {pool_size}\n'
            f"[items.settings]\n{settings}\n")


ROUTER = process_item("Router", "engine.router:Router", """
rules = [{field = "json.country", equals = "PT", target = "PaymentsPT"}]
default_target = "Payments"
""")


def paid(by: str) -> Any:
    return respond(200, json.dumps({"paid_by": by}), content_type="application/json")


def countries(server: HttpTestServer) -> list[str]:
    return [json.loads(r.body)["country"] for r in server.requests]


def test_the_router_sends_pt_bodies_to_one_operation_and_the_rest_to_another(
        store: SqlStore, tmp_path: Path) -> None:
    with HttpTestServer({"POST /pay": paid("pt")}) as pt, \
            HttpTestServer({"POST /pay": paid("other")}) as other:
        items = ROUTER + http_item("PaymentsPT", pt.url) + http_item("Payments", other.url)
        with running(store, items) as (_, production):
            ids = {country: send_message(store, production, "Router", {
                "method": "POST", "path": "/pay", "json": {"country": country, "amount": 10}})
                for country in ("PT", "ES", "FR")}
            rows = {c: wait_for(store, mid, timeout=WAIT) for c, mid in ids.items()}
    assert countries(pt) == ["PT"]
    assert sorted(countries(other)) == ["ES", "FR"]
    for country, row in rows.items():
        assert row is not None and row.status == "Completed"
        reply = json.loads(store.get_message(row.corresponding_id).body)
        assert (reply["status"], json.loads(reply["body"])) == (
            200, {"paid_by": "pt" if country == "PT" else "other"})
    # encore trace of the PT message: CLI -> Router -> PaymentsPT, in time order
    (tmp_path / "production.toml").write_text(
        f'[production]\ndatabase = "{store.url}"\n' + items)
    out = encore("trace", str(ids["PT"]), cwd=tmp_path).stdout.splitlines()
    assert out[0] == f"session {ids['PT']}: cli -> Router, Router -> PaymentsPT"
    texts = [line.split("s  ", 1)[1].strip() for line in out[1:]]
    hops = [t for t in texts if " created" in t]
    assert [h.split(" ", 2)[2] for h in hops] == [
        "(request) cli -> Router created", "(request) Router -> PaymentsPT created",
        "(response) PaymentsPT -> Router created", "(response) Router -> cli created"]
    assert [t for t in texts if " began on " in t] == ["attempt 1 of message "
                                                       f"{ids['PT']} began on Router"]
    sent = [t for t in texts if " sent" in t]
    assert len(sent) == 1 and f"to {pt.url}" in sent[0]  # the router called no server
    offsets = [float(line.split("s  ", 1)[0]) for line in out[1:]]
    assert offsets == sorted(offsets)
    assert texts[-1].endswith("(response) Router -> cli created") or \
        texts[-1] == f"message {ids['PT']} Completed"


def tax_route(handler: Any, record: Recorded) -> None:
    price = json.loads(record.body)["price"]
    respond(200, json.dumps({"tax": round(price * 0.23, 2)}),
            content_type="application/json")(handler, record)


def test_a_process_calling_two_operations_in_turn_answers_with_their_combined_result(
        store: SqlStore) -> None:
    prices = {"GET /price/lamp": respond(200, '{"price": 40}', content_type="application/json")}
    with HttpTestServer(prices) as price_server, \
            HttpTestServer({"POST /tax": tax_route}) as tax_server:
        items = (process_item("Shop", "tests.unit.sample_processes:PriceWithTax")
                 + http_item("Prices", price_server.url) + http_item("Taxes", tax_server.url))
        with running(store, items) as (_, production):
            mid = send_message(store, production, "Shop", {"item": "lamp"})
            row = wait_for(store, mid, timeout=WAIT)
    assert row is not None and row.status == "Completed"
    assert json.loads(store.get_message(row.corresponding_id).body) == {
        "item": "lamp", "price": 40, "tax": 9.2, "total": 49.2}
    assert json.loads(tax_server.requests[0].body) == {"price": 40}
    session = queries.messages(store, session_id=mid)
    requests = [(m["source"], m["target"]) for m in session if m["kind"] == "request"]
    assert requests == [("cli", "Shop"), ("Shop", "Prices"), ("Shop", "Taxes")]
    prices_done = next(m for m in session if m["target"] == "Prices")["time_completed"]
    taxes_sent = next(m for m in session if m["target"] == "Taxes")["time_created"]
    assert prices_done <= taxes_sent  # in turn


def test_a_sync_call_raises_after_its_timeout_and_the_target_message_still_completes(
        store: SqlStore) -> None:
    with HttpTestServer({"/slow": respond(200, "late", delay=SLOW)}) as server:
        items = (process_item("Shop", "tests.unit.sample_processes:Impatient")
                 + http_item("Slow", server.url))
        with running(store, items) as (_, production):
            mid = send_message(store, production, "Shop", {"timeout": SHORT})
            row = wait_for(store, mid, timeout=WAIT)
            assert row is not None and row.status == "Error"
            slow = next(m for m in queries.messages(store, session_id=mid)
                        if m["target"] == "Slow")
            waited = (row.time_completed - row.time_created).total_seconds()
            assert SHORT <= waited < SLOW  # it did not wait for the answer
            assert f"message {slow['id']} to 'Slow' not finished after {SHORT:g} s" \
                in row.error_text
            done = wait_for(store, slow["id"], timeout=WAIT)
    assert done is not None and done.status == "Completed"
    assert json.loads(store.get_message(done.corresponding_id).body)["body"] == "late"
    assert len(server.requests) == 1


def test_a_target_that_ends_in_error_makes_the_sync_call_raise_its_error_text(
        store: SqlStore) -> None:
    prices = {"GET /price/lamp": respond(200, '{"price": 40}', content_type="application/json")}
    with HttpTestServer(prices) as price_server, \
            HttpTestServer({"POST /tax": respond(500, "tax engine on fire")}) as tax_server:
        items = (process_item("Shop", "tests.unit.sample_processes:PriceWithTax")
                 + http_item("Prices", price_server.url) + http_item("Taxes", tax_server.url))
        with running(store, items) as (_, production):
            mid = send_message(store, production, "Shop", {"item": "lamp"})
            row = wait_for(store, mid, timeout=WAIT)
    taxes = next(m for m in queries.messages(store, session_id=mid) if m["target"] == "Taxes")
    assert taxes["status"] == "Error" and "500" in taxes["error_text"]
    assert row is not None and row.status == "Error"
    assert f"CallFailed: message {taxes['id']} to 'Taxes' ended Error" in row.error_text
    assert taxes["error_text"] in row.error_text


def test_a_stop_while_a_process_waits_puts_it_back_and_the_next_run_re_attaches(
        store: SqlStore) -> None:
    with HttpTestServer({"/slow": respond(200, "worth the wait", delay=SLOW)}) as server:
        items = (process_item("Shop", "tests.unit.sample_processes:Impatient")
                 + http_item("Slow", server.url))
        with running(store, items) as (_, production):
            mid = send_message(store, production, "Shop", {"timeout": 60})
            wait_until(lambda: server.requests, WAIT, "the slow request")
        # stopped: the process went back to its queue; Slow finished its attempt in hand
        assert store.get_message(mid).status == "Queued"
        with running(store, items) as (_, production):
            row = wait_for(store, mid, timeout=WAIT)
    assert row is not None and row.status == "Completed"
    assert json.loads(store.get_message(row.corresponding_id).body)["body"] == "worth the wait"
    assert len(server.requests) == 1  # re-attached, not sent twice
    slow = [m for m in queries.messages(store, session_id=mid)
            if m["target"] == "Slow" and m["kind"] == "request"]
    assert len(slow) == 1
    attempts = store.attempts(mid)
    assert [a.outcome for a in attempts] == ["error", "ok"]
    assert "outcome unknown" in attempts[0].error_text


@pytest.mark.parametrize("rule", [
    # an operator that does not exist
    '{field = "json.country", equal = "PT", target = "PaymentsPT"}',
    # a target that is not an item
    '{field = "json.country", equals = "PT", target = "PaymentPT"}',
])
def test_encore_refuses_to_start_with_bad_router_rules(tmp_path: Path, rule: str) -> None:
    text = ('[production]\ndatabase = "sqlite:///' + str(tmp_path / "e.db") + '"\n'
            + process_item("Router", "engine.router:Router", f"rules = [{rule}]\n")
            + http_item("PaymentsPT", "http://127.0.0.1:9"))
    (tmp_path / "production.toml").write_text(text)
    result = encore("run", cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert "item 'Router', setting 'rules': rule 1 (rules[0])" in result.stderr
