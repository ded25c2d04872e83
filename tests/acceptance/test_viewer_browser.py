"""The Message Viewer and the Visual Trace of the operator's console (docs/portal.md) in a
real headless browser, as a person uses them: ``encore send`` fills an item that declares
search properties, ``encore portal`` serves the pages, and Chromium (through Playwright)
searches by a property and by a body field, sorts, saves a search, downloads a CSV export
and reads it with Python's csv module, pages through a long session's trace with its break
and legend, and reads times in its own time zone.

``ENCORE_SCREENSHOTS=DIR`` keeps screenshots of the viewer and the trace in DIR
(docs/img/console-viewer.png and console-trace.png come from there)."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
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
from tests.acceptance.test_portal_browser import PASSWORD, Site

pytestmark = pytest.mark.browser

PRODUCTION = """
[production]
name = "Shop"
database = "sqlite:///{db}"

[[items]]
name = "Orders"
class = "tests.unit.sample_ops:RetryTwiceOperation"
[items.settings]
search_properties = ["order", "customer.id"]

[[items]]
name = "Payments"
class = "tests.unit.sample_ops:RetryTwiceOperation"
"""
ORDERS = 240  # messages sent with `encore send --many`
SESSION_MESSAGES = 150  # messages of the long session: two pages of the Visual Trace
SERVER = "http://payments.internal.example.com:8765/soap/v2"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("viewer")
    db = root / "encore.db"
    (root / "production.toml").write_text(PRODUCTION.format(db=db))
    encore("db", "upgrade", cwd=root)
    for name, role in (("olga", "operator"), ("vera", "viewer")):
        encore("user", "add", name, "--role", role, "--password-stdin", cwd=root,
               stdin=PASSWORD + "\n")
    lines = "".join(json.dumps({"order": n, "customer": {"id": f"C-{n % 7}"},
                                "note": f"line {n}, \"quoted\""}) + "\n"
                    for n in range(1, ORDERS + 1))
    encore("send", "Orders", "--many", "-", cwd=root, stdin=lines)
    encore("send", "Payments", "--body", '{"order": 9, "customer": {"id": "C-2"}}', cwd=root)
    base = Site(f"http://127.0.0.1:{free_port()}")
    base.database = f"sqlite:///{db}"
    base.session = _long_session(base.database)  # type: ignore[attr-defined]
    log = (root / "portal.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "portal", "--port",
                             base.rsplit(":", 1)[1]], cwd=root, env=cli_env(), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        wait_for_portal(base, proc)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _long_session(url: str) -> int:
    """A payment that times out twice 10 s apart, then — 15 minutes later — 149 resends
    that each answer in 40 ms: a long gap and two pages of trace."""
    from engine.store.sql import SqlStore
    from engine.store.transition import AttemptEnd, Transition

    store = SqlStore(url)
    try:
        t0 = store.db_now() - timedelta(hours=2)
        first = store.enqueue(target="Payments", body_class=None, body='{"order": 1}',
                              source="cli", now=t0)
        for k, start in ((1, 0), (2, 10)):
            attempt = store.begin_attempt(first, k, started_at=t0 + timedelta(seconds=start))
            store.apply(Transition(first, None, attempt=AttemptEnd(
                attempt, t0 + timedelta(seconds=start + 7), SERVER, "timeout",
                error_text="no answer in 7 s")))
        store.finish(first, status="Error", error_text="FailureTimeout of 15 seconds exceeded",
                     now=t0 + timedelta(seconds=17))
        for n in range(SESSION_MESSAGES - 1):
            at = t0 + timedelta(seconds=917 + n * 0.1)
            mid = store.enqueue(target="Payments", body_class=None, body='{"order": 1}',
                                source=f"resend:{first}", session_id=first, now=at)
            attempt = store.begin_attempt(mid, 1, started_at=at)
            store.apply(Transition(mid, None, attempt=AttemptEnd(
                attempt, at + timedelta(milliseconds=40), SERVER, status_code=200)))
            store.finish(mid, status="Completed", error_text="",
                         now=at + timedelta(milliseconds=45))
        return first
    finally:
        store.dispose()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(accept_downloads=True, timezone_id="Asia/Tokyo",
                                  viewport={"width": 1400, "height": 900})
    context.set_default_timeout(UI_TIMEOUT)
    yield context.new_page()
    context.close()


def log_in(page: Any, site: str, name: str, path: str = "/messages") -> None:
    page.goto(site + path)
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/login'] button[type=submit]")
    page.wait_for_url(site + path)


def shot(page: Any, name: str) -> None:
    where = os.environ.get("ENCORE_SCREENSHOTS")
    if where:
        page.screenshot(path=str(Path(where) / name), full_page=False)


def message_ids(page: Any) -> list[str]:
    rows = page.locator("tr[data-message-row]")
    return [rows.nth(i).get_attribute("data-message-row") for i in range(rows.count())]


def test_a_property_search_finds_the_one_message_among_the_others(page: Any, site: Site) -> None:
    log_in(page, site, "vera")
    page.fill("input[data-prop='order']", "9")
    page.click("#viewer-filters button[type=submit]")
    page.wait_for_url("**/messages?*prop.order=9*")
    rows = page.locator("tr[data-message-row]")
    assert rows.count() == 1  # the Payments message has no index: only Orders' is found
    page.click(f"a[href='/messages/{message_ids(page)[0]}']")
    assert '"order": 9' in page.inner_text("pre.body")


def test_a_body_field_and_the_property_combine_and_sorting_reorders(page: Any,
                                                                   site: Site) -> None:
    log_in(page, site, "vera", "/messages?prop.customer.id=C-2")
    customers = [n for n in range(1, ORDERS + 1) if n % 7 == 2]  # orders 2, 9, 16, …
    assert len(message_ids(page)) == len(customers)
    page.goto(f"{site}/messages?body_path=customer.id&body_value=C-2")
    assert len(message_ids(page)) == len(customers) + 1  # Payments' too, read from its body
    page.goto(f"{site}/messages?target=Orders")
    page.click("th a[data-sort='time']")  # newest first → oldest first
    page.wait_for_url("**sort=time*order=asc*")
    ascending = [int(i) for i in message_ids(page)]
    assert ascending == sorted(ascending)
    page.click("th a[data-sort='duration']")
    page.wait_for_url("**sort=duration*")
    assert page.locator("td.duration").count() == 50


def test_a_csv_export_downloads_every_row_of_the_filter(page: Any, site: Site,
                                                        tmp_path: Path) -> None:
    log_in(page, site, "vera", "/messages?target=Orders")
    with page.expect_download() as download:
        page.click("#export-csv")
    saved = tmp_path / "export.csv"
    download.value.save_as(saved)
    with saved.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == ORDERS  # every row, not one page of 50
    assert {r["target"] for r in rows} == {"Orders"} and rows[0]["status"] == "Queued"
    assert rows[0]["time_created"].endswith("Z")


def test_a_saved_search_is_listed_opened_and_deleted(page: Any, site: Site) -> None:
    log_in(page, site, "vera", "/messages?prop.order.gt=230&target=Orders")
    page.fill("#save-search input[name=name]", "last orders")
    page.click("#save-search button[type=submit]")
    page.goto(f"{site}/messages")
    page.click("a[data-saved='last orders']")
    page.wait_for_url("**prop.order.gt=230*")
    assert len(message_ids(page)) == 10
    page.click("#saved-searches button")
    page.wait_for_url(f"{site}/messages")
    assert page.locator("a[data-saved='last orders']").count() == 0


def test_the_visual_trace_shows_the_gap_as_a_break_pages_and_a_matching_legend(
        page: Any, site: Site) -> None:
    session = site.session  # type: ignore[attr-defined]
    log_in(page, site, "vera", f"/trace/{session}")
    assert "page 1 of 2" in page.inner_text("#trace-pager")
    assert page.locator("svg [data-message]").count() == 100
    gap = page.locator("svg g.break")
    assert gap.count() == 1 and "15 min" in gap.text_content()
    assert gap.is_visible()
    server = page.locator("svg g[data-participant^='server'] text")
    assert "http://payments.internal.example.com:8765" in "".join(
        server.nth(i).text_content() for i in range(server.count()))
    legend = page.locator("svg g.legend")
    assert legend.is_visible()
    for key, says in (("late_reply", "late reply"), ("retry_wait", "retry wait")):
        sample = page.locator(f"svg g[data-legend='{key}']")
        assert says in sample.text_content()
        drawn = page.locator(f"svg line.{key}, svg g.{key.replace('_', '-')} line").first
        assert sample.locator("line").get_attribute("stroke-dasharray") == \
            drawn.get_attribute("stroke-dasharray")
    shot(page, "console-trace.png")
    page.click("#trace-pager a[rel=next]")
    page.wait_for_url(f"**/trace/{session}?page=2")
    assert page.locator("svg [data-message]").count() == SESSION_MESSAGES - 100


def test_a_user_who_chose_local_time_reads_every_time_in_the_browser_s_zone(
        page: Any, site: Site) -> None:
    log_in(page, site, "olga", "/account")
    page.check("input[name=time_zone][value=local]")
    page.click("#time-zone button[type=submit]")
    page.goto(f"{site}/messages?target=Orders")
    first = page.locator("tr[data-message-row] time").first
    sync_api.expect(first).to_have_attribute("data-local", "1")
    utc = first.get_attribute("datetime")  # 2026-12-01T12:34:56.789Z
    shown = first.inner_text()
    hours = (int(utc[11:13]) + 9) % 24  # Asia/Tokyo is UTC+9 all year
    assert shown[11:13] == f"{hours:02d}" and shown[14:] == utc[14:23]
    assert "local, Asia/Tokyo" in page.inner_text("thead")
    assert "local, Asia/Tokyo" in page.inner_text("header.top")
    page.goto(f"{site}/events")
    assert "local, Asia/Tokyo" in page.inner_text("thead")
    page.goto(f"{site}/account")
    page.check("input[name=time_zone][value=UTC]")
    page.click("#time-zone button[type=submit]")
    page.goto(f"{site}/messages?target=Orders")
    assert page.locator("time[data-local]").count() == 0
    assert "(UTC)" in page.inner_text("thead")


def test_screenshot_of_the_message_viewer(page: Any, site: Site) -> None:
    log_in(page, site, "olga", "/messages?prop.customer.id=C-3&sort=time&order=desc")
    assert len(message_ids(page)) == len([n for n in range(1, ORDERS + 1) if n % 7 == 3])
    page.fill("#save-search input[name=name]", "customer C-3")
    page.click("#save-search button[type=submit]")
    page.wait_for_url("**prop.customer.id=C-3*")
    shot(page, "console-viewer.png")
