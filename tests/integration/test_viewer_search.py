"""The Message Viewer searchable like a search table (docs/portal.md), on SQLite and
PostgreSQL: search properties written by every way a message is accepted, the ``prop.`` and
``body.`` filters, source, sorting, the duration column, saved searches, and exports that
hold every row."""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from engine.client import accept_message, send_message, send_messages
from engine.config.production import parse_production
from engine.errors import ConfigurationError
from engine.portal import create_app
from engine.store import operator, searches, viewer
from engine.store.lite import LiteIntake
from engine.store.models import message_header, message_property
from engine.store.sql import SqlStore
from tests.portal_support import add_token, add_user, bearer, csrf_of, login

PRODUCTION = """
[production]
name = "ViewerTest"

[[items]]
name = "Orders"
class = "tests.unit.sample_ops:RetryTwiceOperation"
[items.settings]
search_properties = ["order", "customer.id", "tags", "amount"]

[[items]]
name = "Plain"
class = "tests.unit.sample_ops:RetryTwiceOperation"
"""


def production(url: str):  # type: ignore[no-untyped-def]
    return parse_production(PRODUCTION, env={"ENCORE_DATABASE_URL": url})


@pytest.fixture
def client(store: SqlStore) -> Iterator[TestClient]:
    for name, role in (("olga", "operator"), ("vera", "viewer")):
        add_user(store, name, role)
    with TestClient(create_app(store, production(store.url), secret="s", env={})) as c:
        yield c


def properties_of(store: SqlStore, message_id: int) -> set[tuple[str, str, float | None]]:
    p = message_property.c
    with store.engine.connect() as conn:
        return {tuple(r) for r in conn.execute(  # type: ignore[misc]
            select(p.name, p.value_text, p.value_num).where(p.message_id == message_id))}


ORDER = {"order": 9, "customer": {"id": "C-17", "name": "Ada"}, "tags": ["vip", "eu"],
         "amount": "250.5", "note": "x"}
EXPECTED = {("order", "9", 9.0), ("customer.id", "C-17", None), ("tags", "vip", None),
            ("tags", "eu", None), ("amount", "250.5", 250.5)}


# -- indexing at intake ------------------------------------------------------------------
def test_every_way_in_indexes_the_search_properties_in_the_accepting_transaction(
        store: SqlStore) -> None:
    prod = production(store.url)
    one = send_message(store, prod, "Orders", ORDER)  # group-committed intake
    keyed = accept_message(store, prod, "Orders", ORDER, idempotency_key="k1").id
    replay = accept_message(store, prod, "Orders", ORDER, idempotency_key="k1")
    quick = accept_message(store, prod, "Orders", ORDER, durable=False).id  # a process's call
    many = send_messages(store, prod, "Orders", [ORDER, {"order": 10}])
    lite = LiteIntake(store.url)
    try:
        lite.check_schema()
        by_lite = send_message(lite, prod, "Orders", ORDER)
        by_lite_many = send_messages(lite, prod, "Orders", [ORDER])
    finally:
        lite.dispose()
    assert replay.id == keyed and not replay.created
    for message_id in (one, keyed, quick, many[0], by_lite, *by_lite_many):
        assert properties_of(store, message_id) == EXPECTED, message_id
    assert properties_of(store, many[1]) == {("order", "10", 10.0)}
    assert properties_of(store, send_message(store, prod, "Plain", ORDER)) == set()


def test_a_resent_copy_has_its_properties_and_the_purge_removes_them(store: SqlStore) -> None:
    prod = production(store.url)
    original = send_message(store, prod, "Orders", ORDER)
    store.finish(original, status="Error", error_text="failed", now=store.db_now())
    copy = operator.resend(store, original, now=store.db_now())
    assert properties_of(store, copy) == EXPECTED
    store.finish(copy, status="Error", error_text="failed", now=store.db_now())
    operator.purge(store, timedelta(0), store.db_now() + timedelta(seconds=1))
    assert properties_of(store, original) == properties_of(store, copy) == set()


@pytest.mark.parametrize("paths, says", [
    ('"order"', "expected list"),                         # not a list
    ('["customer..id"]', "not a dotted path"),            # empty name in the path
    ('["order", "order"]', "given twice"),                # a duplicate
    ("[1]", "not a dotted path"),                         # not a string
])
def test_a_bad_search_property_is_refused_at_load_naming_the_item_and_key(
        paths: str, says: str) -> None:
    text = PRODUCTION.replace('["order", "customer.id", "tags", "amount"]', paths)
    with pytest.raises(ConfigurationError) as caught:
        parse_production(text, env={"ENCORE_DATABASE_URL": "sqlite://"})
    assert "Orders" in str(caught.value) and "search_properties" in str(caught.value)
    assert says in str(caught.value)


# -- filters -----------------------------------------------------------------------------
def _fill(store: SqlStore) -> dict[str, int]:
    prod = production(store.url)
    ids = {"a": send_message(store, prod, "Orders", {"order": 9, "customer": {"id": "C-1"},
                                                      "amount": 100}, source="cli"),
           "b": send_message(store, prod, "Orders", {"order": 10, "customer": {"id": "C-1"},
                                                      "amount": 300}, source="api:shop"),
           "c": send_message(store, prod, "Orders", {"order": 11, "customer": {"id": "C-2"},
                                                      "amount": 50}, source="cli"),
           "d": send_message(store, prod, "Plain", {"order": 9, "customer": {"id": "C-1"}},
                             source="cli")}
    return ids


def _ids(client: TestClient, query: str, headers: dict[str, str]) -> list[int]:
    response = client.get(f"/api/v1/messages?{query}", headers=headers)
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["messages"]]


def test_property_filters_find_by_equality_several_anded_and_ranges(
        client: TestClient, store: SqlStore) -> None:
    ids = _fill(store)
    viewer_ = bearer(add_token(store, "viewer"))
    assert _ids(client, "prop.order=9", viewer_) == [ids["a"]]  # Plain indexes nothing
    assert _ids(client, "prop.customer.id=C-1", viewer_) == [ids["b"], ids["a"]]
    assert _ids(client, "prop.customer.id=C-1&prop.order=10", viewer_) == [ids["b"]]
    assert _ids(client, "prop.amount.gt=60&prop.amount.lt=301", viewer_) == [ids["b"], ids["a"]]
    assert _ids(client, "prop.order=9.0", viewer_) == [ids["a"]]  # numbers as numbers
    assert _ids(client, "prop.order=12", viewer_) == []


def test_a_body_filter_reads_any_body_and_combines_with_the_others(
        client: TestClient, store: SqlStore) -> None:
    ids = _fill(store)
    viewer_ = bearer(add_token(store, "viewer"))
    assert _ids(client, "body.customer.id=C-1", viewer_) == [ids["d"], ids["b"], ids["a"]]
    assert _ids(client, "body.customer.id=C-1&target=Plain", viewer_) == [ids["d"]]
    assert _ids(client, "body.order=11", viewer_) == [ids["c"]]
    assert _ids(client, "source=api:shop", viewer_) == [ids["b"]]


def test_a_filter_that_makes_no_sense_is_refused_naming_it(
        client: TestClient, store: SqlStore) -> None:
    viewer_ = bearer(add_token(store, "viewer"))
    unknown = client.get("/api/v1/messages?prop.colour=red", headers=viewer_)
    assert unknown.status_code == 400
    assert "'colour' is not a search property" in unknown.json()["error"]
    assert "order" in unknown.json()["error"]  # the ones that exist are named
    for query, says in (("sort=size", "sort"), ("order=up", "order"),
                        ("body.a..b=1", "dotted path"), ("format=xml", "format")):
        response = client.get(f"/api/v1/messages?{query}", headers=viewer_)
        assert response.status_code == 400 and says in response.json()["error"], query


def test_sorting_by_each_column_both_ways_pages_through_every_row_once(
        store: SqlStore) -> None:
    prod = production(store.url)
    for n in range(7):
        message_id = send_message(store, prod, "Orders" if n % 2 else "Plain", {"n": n})
        if n % 3:  # durations seconds apart, none equal: an order with no ties
            store.finish(message_id, status="Error", error_text="x",
                         now=store.db_now() + timedelta(seconds=10 * (n % 4) + n))
    for sort in viewer.SORTS:
        for descending in (True, False):
            flt = viewer.MessageFilter(sort=sort, descending=descending)
            seen, before = [], None
            while True:
                page = viewer.messages_page(store, flt, before=before, limit=2)
                seen += page.rows
                if page.older is None:
                    break
                before = page.older
            assert len({r["id"] for r in seen}) == 7, (sort, descending)
            key = {"time": lambda r: r["id"], "target": lambda r: (r["target"], r["id"]),
                   "status": lambda r: (r["status"], r["id"]),
                   "duration": lambda r: (r["duration_ms"] if r["duration_ms"] is not None
                                          else 1e15, r["id"])}[sort]
            assert [r["id"] for r in seen] == [r["id"] for r in sorted(
                seen, key=key, reverse=descending)], (sort, descending)


def test_a_finished_message_shows_its_duration(client: TestClient, store: SqlStore) -> None:
    message_id = send_message(store, production(store.url), "Orders", {"order": 1})
    store.finish(message_id, status="Error", error_text="x", now=store.db_now())
    row = viewer.messages_page(store, viewer.MessageFilter()).rows[0]
    assert row["duration_ms"] is not None and row["duration_ms"] >= 0
    login(client, "vera")
    page = client.get("/messages?sort=duration").text
    assert " ms</td>" in page and 'data-sort="duration"' in page


# -- exports -----------------------------------------------------------------------------
def test_a_csv_export_holds_every_row_of_the_filter_in_the_csv_module(
        client: TestClient, store: SqlStore) -> None:
    prod = production(store.url)
    send_messages(store, prod, "Orders", [{"order": n, "note": 'a "quoted", text\nline'}
                                          for n in range(2_345)])
    send_messages(store, prod, "Plain", [{"order": 1}] * 5)
    login(client, "vera")
    response = client.get("/messages.csv?target=Orders&body=1")
    assert response.status_code == 200 and response.headers["content-type"].startswith(
        "text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 2_345 and {r["target"] for r in rows} == {"Orders"}
    assert json.loads(rows[-1]["body"]) == {"order": 0, "note": 'a "quoted", text\nline'}
    assert [int(r["id"]) for r in rows] == sorted((int(r["id"]) for r in rows), reverse=True)


def test_the_api_exports_json_lines_and_the_event_log_exports_too(
        client: TestClient, store: SqlStore) -> None:
    prod = production(store.url)
    send_messages(store, prod, "Orders", [{"order": n} for n in range(30)])
    for n in range(1_205):
        store.events.write("Info", f"event {n}", config_name="Orders")
    viewer_ = bearer(add_token(store, "viewer"))
    lines = client.get("/api/v1/messages?prop.order.lt=10&format=jsonl", headers=viewer_)
    found = [json.loads(line) for line in lines.text.splitlines()]
    assert sorted(m["id"] for m in found) == sorted(
        m["id"] for m in found if m["target"] == "Orders") and len(found) == 10
    events = client.get("/api/v1/events?item=Orders&format=csv", headers=viewer_)
    assert len(list(csv.DictReader(io.StringIO(events.text)))) == 1_205
    assert client.get("/api/v1/messages?format=csv").status_code == 401


# -- saved searches ----------------------------------------------------------------------
def test_saved_searches_belong_to_their_user_and_can_be_deleted(
        client: TestClient, store: SqlStore) -> None:
    login(client, "vera")
    token = csrf_of(client)
    saved = client.post("/searches", data={"csrf_token": token, "name": "big orders",
                                           "query": "prop.amount.gt=100&target=Orders"},
                        follow_redirects=False)
    assert saved.status_code == 303
    page = client.get("/messages").text
    assert 'data-saved="big orders"' in page and "prop.amount.gt=100" in page
    assert [s["name"] for s in searches.saved_searches(store, "olga")] == []
    forged = client.post("/searches", data={"csrf_token": "forged", "name": "x", "query": ""})
    assert forged.status_code == 403
    search_id = searches.saved_searches(store, "vera")[0]["id"]
    client.post(f"/searches/{search_id}/delete", data={"csrf_token": token})
    assert searches.saved_searches(store, "vera") == []


def test_the_header_table_is_untouched_by_a_search_on_properties(store: SqlStore) -> None:
    """The viewer's reads are reads: no column of message_header changes."""
    ids = _fill(store)
    with store.engine.connect() as conn:
        before = conn.execute(select(message_header).order_by(message_header.c.id)).all()
    viewer.messages_page(store, viewer.MessageFilter(props=(
        viewer.PropertyFilter("order", "eq", "9"),)))
    with store.engine.connect() as conn:
        assert conn.execute(select(message_header).order_by(message_header.c.id)).all() == before
    assert ids
