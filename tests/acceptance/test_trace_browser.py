"""The Visual Trace invents nothing (docs/portal.md "Visual Trace"), read in a real headless
browser: a real daemon routes messages through a Router to an HTTP operation calling a
loopback server; one delivery is cut short by ``kill -9`` while the server holds its request,
and a new daemon finishes it. Chromium (through Playwright) reads each trace's participants
from the SVG, finds the attempts cut short, and measures every text with ``getBBox`` against
the picture's width. ``ENCORE_SCREENSHOTS=DIR`` keeps the cut-short trace in DIR
(docs/img/console-trace-cut-short.png comes from there)."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.store.sql import SqlStore
from tests.acceptance.browser import (
    UI_TIMEOUT,
    browser,  # noqa: F401 - the fixture
    free_port,
    portal_running,
)
from tests.acceptance.daemon import RunningDaemon, encore
from tests.acceptance.test_portal_browser import PASSWORD, Site
from tests.servers import HttpTestServer, respond, sequence
from tests.waiting import wait_until

pytestmark = pytest.mark.browser

HELD = 30.0  # seconds the server holds the request the kill cuts short (never reached)
SETTLE = 60  # seconds for a message to settle on a loaded machine
PRODUCTION = """
[production]
name = "Routes"
database = "sqlite:///{db}"
poll_interval = 0.05
lease_seconds = 3

[[items]]
name = "Router"
class = "engine.router:Router"
[items.settings]
rules = [{{field = "json.order", greater_than = 0, target = "Payments"}}]
default_target = "Payments"

[[items]]
name = "Payments"
class = "operations.http:HttpOperation"
[items.settings]
url = "{url}"
idempotent = true
response_timeout = 40
failure_timeout = 120
"""


class Sessions(Site):
    """The portal's base URL, the two sessions and the server they called."""

    routed: int
    cut: int
    server: str


def body(path: str) -> str:
    return json.dumps({"method": "POST", "path": path, "json": {"order": 7}})


def final(store: SqlStore, mid: int) -> bool:
    row = store.get_message(mid)
    return row is not None and row.status in ("Completed", "Error", "Suspended")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sessions]:
    root = tmp_path_factory.mktemp("trace")
    db = root / "encore.db"
    routes = {"POST /ok": respond(200, "paid"),
              "POST /held": sequence(respond(200, "late", delay=HELD), respond(200, "paid"))}
    with HttpTestServer(routes) as server:
        (root / "production.toml").write_text(PRODUCTION.format(db=db, url=server.url))
        encore("db", "upgrade", cwd=root)
        encore("user", "add", "vera", "--role", "viewer", "--password-stdin", cwd=root,
               stdin=PASSWORD + "\n")
        store = SqlStore(f"sqlite:///{db}")
        with RunningDaemon(root) as daemon:
            routed = json.loads(encore("send", "Router", "--body", body("/ok"), "--wait", "30",
                                       "--json", cwd=root).stdout)["id"]
            cut = int(encore("send", "Router", "--body", body("/held"), cwd=root).stdout)
            wait_until(lambda: any(r.path == "/held" for r in server.requests), SETTLE,
                       "the held request to reach the server")
            daemon.kill()  # kill -9: both the router's and the operation's attempt cut short
        with RunningDaemon(root) as daemon:
            wait_until(lambda: final(store, cut), SETTLE, "the cut message to settle")
            assert daemon.terminate() == 0
        store.dispose()
    base = Sessions(f"http://127.0.0.1:{free_port()}")
    base.routed, base.cut, base.server = routed, cut, server.url
    with portal_running(root, base):
        yield base


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(UI_TIMEOUT)
    page = context.new_page()
    yield page
    context.close()


def open_trace(page: Any, site: Sessions, session: int) -> None:
    page.goto(f"{site}/trace/{session}")
    if "/login" in page.url:
        page.fill("input[name=username]", "vera")
        page.fill("input[name=password]", PASSWORD)
        page.click("form[action='/login'] button[type=submit]")
        page.wait_for_url(f"{site}/trace/{session}")


def shot(page: Any, name: str) -> None:
    """``ENCORE_SCREENSHOTS=DIR``: keep a screenshot of the trace in DIR (docs/img's)."""
    where = os.environ.get("ENCORE_SCREENSHOTS")
    if where:
        page.locator("svg.trace").screenshot(path=str(Path(where) / name))


def participant_labels(page: Any) -> list[str]:
    """Each participant as its header reads (its lines joined, "server" before an address)."""
    return page.eval_on_selector_all(
        "svg.trace g[data-participant]",
        "groups => groups.map(g => [...g.querySelectorAll('text')]"
        ".map(t => t.textContent).join(' '))")


def texts_past_the_edges(page: Any) -> list[dict[str, Any]]:
    """Every text whose box, measured by the browser, reaches outside the picture."""
    return page.eval_on_selector("svg.trace", """svg => {
        const width = svg.width.baseVal.value, out = [];
        for (const t of svg.querySelectorAll('text')) {
            const box = t.getBBox(), m = t.getCTM();
            const left = new DOMPoint(box.x, box.y).matrixTransform(m).x;
            const right = new DOMPoint(box.x + box.width, box.y).matrixTransform(m).x;
            if (left < 0 || right > width) out.push({text: t.textContent, left, right, width});
        }
        return out;
    }""")


def overlapping_texts(page: Any) -> list[list[str]]:
    """Pairs of texts of the drawing whose boxes, measured by the browser, overlap."""
    return page.eval_on_selector("svg.trace g.drawing", """drawing => {
        const boxes = [...drawing.querySelectorAll('text')].map(t => [t.textContent,
                                                                     t.getBBox()]), out = [];
        for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
            const [a, p] = boxes[i], [b, q] = boxes[j];
            if (p.x < q.x + q.width && q.x < p.x + p.width && p.y < q.y + q.height
                && q.y < p.y + p.height) out.push([a, b]);
        }
        return out;
    }""")


def overlapping_legend_entries(page: Any) -> list[list[str]]:
    """Pairs of legend entries of one row whose boxes, measured by the browser, overlap."""
    return page.eval_on_selector_all("svg.trace g[data-legend]", """entries => {
        const boxes = entries.map(e => [e.dataset.legend, e.getBBox()]), out = [];
        for (const [a, p] of boxes) for (const [b, q] of boxes) {
            const sameRow = Math.abs(p.y - q.y) < 4;
            if (a < b && sameRow && p.x < q.x + q.width && q.x < p.x + p.width) out.push([a, b]);
        }
        return out;
    }""")


def test_a_router_hop_has_exactly_the_participants_that_took_part(page: Any,
                                                                  site: Sessions) -> None:
    open_trace(page, site, site.routed)
    address = site.server.split("://", 1)[1].rstrip("/")
    labels = participant_labels(page)
    assert labels[:3] == ["cli", "Router", "Payments"] and len(labels) == 4, labels
    assert labels[3].startswith("server http://") and address in labels[3].replace(" ", "")
    assert page.locator("svg.trace g.attempt.own-work").count() == 1  # the router's
    assert page.locator("svg.trace g.attempt.remote").count() == 1  # Payments' call
    assert "remote server" not in page.inner_text("body")


def test_a_delivery_cut_short_by_a_kill_is_marked_so_and_invents_no_server(
        page: Any, site: Sessions) -> None:
    open_trace(page, site, site.cut)
    labels = participant_labels(page)
    assert labels[:3] == ["cli", "Router", "Payments"] and len(labels) == 4, labels
    cut = page.locator("svg.trace g.attempt[data-cut-short='true']")
    assert cut.count() == 2  # the router's attempt and the operation's, both in flight
    for i in range(cut.count()):
        says = " ".join(cut.nth(i).locator("text").all_text_contents())
        assert "cut short" in says and "daemon died" in says
        assert re.search(r"\d\.\d{3} s", says) is None, says  # no duration: none is known
        assert cut.nth(i).locator("path.cut-mark").count() == 1
        assert "outcome unknown" in cut.nth(i).locator("title").text_content()
    assert overlapping_texts(page) == []
    resent = page.locator("svg.trace g.attempt.remote.outcome-ok")
    assert resent.count() == 1  # the idempotent call sent again by the new daemon
    shot(page, "console-trace-cut-short.png")


@pytest.mark.parametrize("which", ["routed", "cut"])
def test_the_legend_and_every_text_fit_in_the_picture(page: Any, site: Sessions,
                                                       which: str) -> None:
    open_trace(page, site, getattr(site, which))
    assert page.locator("svg.trace g[data-legend]").count() == 8
    assert texts_past_the_edges(page) == []
    assert overlapping_legend_entries(page) == []
    assert page.locator("svg.trace g[data-legend='break'] text").is_visible()
