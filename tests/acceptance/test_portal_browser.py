"""The portal in a real headless browser (Debian's chromium through Playwright), as a person
uses it: ``encore portal`` as a subprocess over a SQLite file that the real engine filled by
running the seed scenario (``encore demo``: one message completes, one is sent four times,
times out each time and gives up)."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.acceptance.browser import (
    UI_TIMEOUT,
    browser,  # noqa: F401 - the fixture
    free_port,
    sync_api,
    wait_for_portal,
)
from tests.acceptance.daemon import cli_env, encore

pytestmark = pytest.mark.browser

PASSWORD = "a long enough password"
RED = "rgb(198, 40, 40)"  # the portal's colour of Error
PRODUCTION = """
[production]
name = "Seed"
database = "sqlite:///{db}"

[[items]]
name = "DemoSoapService"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "http://127.0.0.1:9/?wsdl"
"""

class Site(str):
    """The portal's base URL, which also knows its database's URL (``.database``)."""

    database: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The portal's base URL over a database the seed scenario filled."""
    root = tmp_path_factory.mktemp("portal")
    db = root / "encore.db"
    encore("demo", "--database", f"sqlite:///{db}", cwd=root)
    (root / "production.toml").write_text(PRODUCTION.format(db=db))
    for name, role in (("olga", "operator"), ("vera", "viewer")):
        encore("user", "add", name, "--role", role, "--password-stdin", cwd=root,
               stdin=PASSWORD + "\n")
    port = free_port()
    log = (root / "portal.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "portal", "--port", str(port)],
                            cwd=root, env=cli_env(), stdout=log, stderr=subprocess.STDOUT)
    base = Site(f"http://127.0.0.1:{port}")
    base.database = f"sqlite:///{db}"
    try:
        wait_for_portal(base, proc)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    context.set_default_timeout(UI_TIMEOUT)
    yield context.new_page()
    context.close()


def log_in(page: Any, site: str, name: str, path: str = "/") -> None:
    """Open ``path``, land on the login form, log in, and be taken back to ``path``."""
    page.goto(site + path)
    assert "/login" in page.url
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/login'] button[type=submit]")
    page.wait_for_url(site + path)


def test_an_operator_filters_the_viewer_opens_the_failed_message_and_its_visual_trace(
        page: Any, site: str) -> None:
    log_in(page, site, "olga", "/messages")
    page.select_option("select[name=status]", "Error")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**/messages?*status=Error*")
    rows = page.locator("tr[data-message-row]")
    assert rows.count() == 1
    status = rows.first.locator("td.status")
    assert status.inner_text().startswith("Error")
    assert status.evaluate("cell => getComputedStyle(cell).color") == RED
    message_id = rows.first.get_attribute("data-message-row")

    rows.first.locator(f"a[href='/messages/{message_id}']").click()
    page.wait_for_url(f"{site}/messages/{message_id}")
    assert page.locator("tr[data-attempt-row]").count() == 4
    assert "FailureTimeout of 3 seconds exceeded" in page.inner_text("dl.header")

    page.click("a:has-text('Visual Trace')")
    page.wait_for_url(f"{site}/trace/*")
    assert page.locator("main svg").count() == 1
    attempts = page.locator("svg [data-attempt]")
    assert attempts.count() == 4
    assert [attempts.nth(i).get_attribute("data-attempt") for i in range(4)] == \
        ["1", "2", "3", "4"]
    assert [attempts.nth(i).get_attribute("data-outcome") for i in range(4)] == \
        ["timeout"] * 4
    assert page.locator("svg .retry-wait").count() == 3  # the waits between attempts
    page.click(f"svg [data-message='{message_id}']")
    page.wait_for_url(f"{site}/messages/{message_id}")


def test_an_operator_resends_a_message_only_after_confirming_and_sees_the_copy_queued(
        page: Any, site: str) -> None:
    log_in(page, site, "olga", "/messages?status=Error")
    message_id = page.locator("tr[data-message-row]").first.get_attribute("data-message-row")
    page.goto(f"{site}/messages/{message_id}")
    asked: list[str] = []

    def dismiss(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click("button[data-action=resend]")
    assert asked == [f"Resend message {message_id}?"]
    assert page.url == f"{site}/messages/{message_id}"  # cancelled: still here

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=resend]")
    page.wait_for_url(lambda url: url.rstrip("/") != f"{site}/messages/{message_id}")
    assert page.inner_text("h1 .status") == "Queued"
    assert page.inner_text("dl.header").count(f"resend:{message_id}") == 1

    page.goto(f"{site}/events?type=Info")
    assert "by user 'olga' (operator) through the portal" in page.inner_text("#event-rows")


def test_a_viewer_sees_no_action_button_and_the_server_refuses_a_forged_one(
        page: Any, site: str) -> None:
    log_in(page, site, "vera", "/")
    assert page.locator("tr[data-item='DemoSoapService']").count() == 1
    assert page.locator("form.action").count() == 0
    page.goto(f"{site}/messages?status=Error")
    message_id = page.locator("tr[data-message-row]").first.get_attribute("data-message-row")
    page.goto(f"{site}/messages/{message_id}")
    assert page.locator("form.action, button[data-action]").count() == 0
    assert page.locator("a.bulk").count() == 0
    status = page.evaluate("""async (id) => {
        const token = document.querySelector("input[name=csrf_token]").value;
        const body = new URLSearchParams({csrf_token: token, confirmed: "yes"});
        const response = await fetch(`/messages/${id}/resend`, {method: "POST", body});
        return response.status;
    }""", message_id)
    assert status == 403


def test_the_event_log_follows_new_events_without_a_reload(page: Any, site: Site) -> None:
    from engine.store.sql import SqlStore

    log_in(page, site, "vera", "/events?follow=1")
    assert page.is_checked("#follow")
    store = SqlStore(site.database)
    try:
        store.events.write("Warning", "written while the page was open",
                           config_name="DemoSoapService")
    finally:
        store.dispose()
    first_row = page.locator("#event-rows tr").first
    sync_api.expect(first_row).to_contain_text("written while the page was open",
                                               timeout=UI_TIMEOUT)
    assert page.url == f"{site}/events?follow=1"  # no reload: the script added the row
