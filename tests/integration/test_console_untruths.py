"""The console says what is so (issue 37): the Testing Service refuses a disabled item at once
and offers an example body, its result on top; a disabled item's queue does not promise
"now"; a suspended message has no duration; a reload refusal that a later reload fixed is no
longer the item's last error. A real daemon in this process, on SQLite (dialect-free)."""
from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from engine.config.production import load_production
from engine.portal import create_app
from engine.runtime.daemon import Daemon
from engine.store.models import message_header
from engine.store.sql import SqlStore
from tests.integration.test_console_api import (  # noqa: F401 - the fixture
    PATIENCE,
    Setup,
    info_events,
    setup,
)
from tests.portal_support import add_user, csrf_of, login
from tests.servers import SoapTestServer
from tests.waiting import wait_until

pytestmark = pytest.mark.dialect_free

REFUSED_AT_ONCE = 15.0  # seconds: far below the 30 s a test message would wait


def messages_to(s: Setup, target: str) -> int:
    with s.store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(message_header).where(
            message_header.c.target == target)).scalar_one())


def disable(s: Setup, name: str) -> None:
    answer = s.client.post(f"/api/v1/items/{name}/disable", headers=s.tokens["operator"])
    assert answer.status_code in (200, 202, 204), answer.text


def test_the_testing_service_refuses_a_disabled_item_at_once_and_sends_nothing(
        setup: Setup) -> None:
    disable(setup, "Echo")
    started = time.monotonic()
    answer = setup.client.post("/api/v1/items/Echo/test", content='{"text": "hi"}',
                               headers=setup.tokens["operator"])
    assert time.monotonic() - started < REFUSED_AT_ONCE
    assert answer.status_code == 409
    assert "Echo is disabled" in answer.json()["error"] and "enable it" in answer.json()["error"]
    login(setup.client, "olga")
    token = csrf_of(setup.client)
    page = setup.client.post("/items/Echo/test", data={"body": '{"text": "x"}',
                                                       "csrf_token": token})
    assert page.status_code == 409  # refused before the confirmation is even asked
    assert "Not sent: item Echo is disabled" in page.text
    assert page.text.index('id="test-result"') < page.text.index("<h2>Running</h2>")
    confirmed = setup.client.post("/items/Echo/test", data={
        "body": '{"text": "x"}', "csrf_token": token, "confirmed": "yes"})
    assert confirmed.status_code == 409
    assert messages_to(setup, "Echo") == 0 and info_events(setup.store, "test") == []


def test_the_testing_service_offers_an_example_body_and_shows_its_result_on_top(
        setup: Setup) -> None:
    login(setup.client, "olga")
    echo = setup.client.get("/items/Echo").text
    assert '&#34;text&#34;: &#34;&#34;' in echo and '&#34;count&#34;: 1' in echo  # Ping's fields
    web = setup.client.get("/items/Web").text
    assert '&#34;method&#34;: &#34;POST&#34;' in web and '&#34;path&#34;: &#34;/&#34;' in web
    token = csrf_of(setup.client)
    shown = setup.client.post("/items/Echo/test", data={
        "body": '{"text": "form"}', "csrf_token": token, "confirmed": "yes"})
    assert 'id="test-status">Completed<' in shown.text
    assert shown.text.index('id="test-result"') < shown.text.index("<h2>Running</h2>")


def test_a_disabled_item_s_queue_says_it_waits_for_the_item_not_now(setup: Setup) -> None:
    disable(setup, "Echo")
    setup.client.post("/api/v1/messages/Echo", json={"text": "q"},
                      headers=setup.tokens["sender"])
    login(setup.client, "olga")
    page = setup.client.get("/queues/Echo").text
    assert 'id="queue-disabled"' in page
    assert "when the item is enabled" in page and ">now<" not in page


def test_a_suspended_message_shows_no_duration(setup: Setup) -> None:
    disable(setup, "Echo")
    mid = setup.client.post("/api/v1/messages/Echo", json={"text": "q"},
                            headers=setup.tokens["sender"]).json()["id"]
    login(setup.client, "olga")
    token = csrf_of(setup.client)
    setup.client.post(f"/queues/Echo/{mid}/suspend",
                      data={"csrf_token": token, "confirmed": "yes"})
    assert setup.store.get_message(mid).status == "Suspended"
    assert setup.store.get_message(mid).time_completed is not None  # what the duration read
    rows = setup.client.get("/api/v1/messages?target=Echo",
                            headers=setup.tokens["viewer"]).json()["messages"]
    assert [r["duration_ms"] for r in rows if r["id"] == mid] == [None]
    page = setup.client.get("/messages?target=Echo").text
    row = page[page.index(f'data-message-row="{mid}"'):]
    assert '<td class="num duration">–</td>' in row[:row.index("</tr>")]
    exported = csv.DictReader(io.StringIO(setup.client.get("/messages.csv?target=Echo").text))
    assert [r["duration_ms"] for r in exported if r["id"] == str(mid)] == [""]


def test_a_refusal_a_later_reload_fixed_is_no_longer_the_item_s_last_error(
        setup: Setup) -> None:
    original = setup.path.read_text()
    broken = original.replace('class = "tests.integration.test_console_api:CountedOperation"',
                              'class = "tests.unit.sample_ops:BrokenInitOperation"')
    assert broken != original

    def counted() -> dict[str, object]:
        status = setup.client.get("/api/v1/status", headers=setup.tokens["viewer"]).json()
        return next(i for i in status["items"] if i["name"] == "Counted")

    setup.path.write_text(broken)
    setup.daemon.reload()
    last = counted()["last_error"]
    assert isinstance(last, dict) and str(last["text"]).startswith("reload refused")
    setup.path.write_text(original)
    setup.daemon.reload()
    wait_until(lambda: not counted()["running"]["refused"], PATIENCE,  # type: ignore[index]
               "the daemon to report the refusal gone")
    assert counted()["last_error"] is None


def test_a_soap_item_s_example_body_names_an_operation_its_wsdl_offers(
        tmp_path: Path, store: SqlStore) -> None:
    with SoapTestServer() as server:
        path = tmp_path / "production.toml"
        path.write_text(f'[production]\nname = "Soapy"\ndatabase = "{store.url}"\n\n'
                        f'[[items]]\nname = "Echoes"\nclass = "operations.soap:SoapOperation"\n'
                        f'[items.settings]\nwsdl = "{server.wsdl}"\n')
        production = load_production(path, {})
        add_user(store, "olga", "operator")
        daemon = Daemon(production, store=store, env={})
        daemon.start()
        app = create_app(store, production, secret="test-secret", env={})
        try:
            with TestClient(app) as client:
                login(client, "olga")
                wait_until(lambda: "&#34;operation&#34;: &#34;echo&#34;" in
                           client.get("/items/Echoes").text, PATIENCE,
                           "the daemon to report the WSDL's operations")
                page = client.get("/items/Echoes").text
                assert "operations: echo, fail, refuse" in page
        finally:
            app.state.follower.stop()
            daemon.stop()
