"""The operator's console (docs/portal.md) in a real headless browser, as a person uses it:
``encore run`` and a standalone ``encore portal`` as subprocesses on one SQLite file, an
HTTP item whose loopback server the test stops and starts, an operation that counts its
``on_init`` calls in a file, a router and a service for the diagram's arrows.

Real time: the assertions wait for what a person would see (the page refreshes itself) with
generous bounds, except the one the issue names — a standalone portal takes intake for an
item that a SIGHUP added within 2 s."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import select

from engine.store.models import event_log
from engine.store.sql import SqlStore
from tests.acceptance.browser import (
    UI_TIMEOUT,
    browser,  # noqa: F401 - the fixture
    free_port,
    wait_for_portal,
)
from tests.acceptance.daemon import RunningDaemon, cli_env, encore
from tests.acceptance.test_portal_browser import PASSWORD, log_in
from tests.waiting import wait_until

pytestmark = pytest.mark.browser

# ENCORE_SCREENSHOTS=1: write the screenshots docs/ shows (else into the test's directory)
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
LIGHT_TIMEOUT = 30_000  # ms for a light to change (a retry, a flush, a refresh, at load 6)
PRODUCTION = """
[production]
name = "Console"
database = "sqlite:///{db}"

[[items]]
name = "Orders"
class = "console_ops:QuietService"
[items.settings]
targets = ["Route"]

[[items]]
name = "Route"
class = "engine.router:Router"
[items.settings]
rules = [{{field = "path", exists = true, target = "Web"}}]
default_target = "Counter"

[[items]]
name = "Web"
class = "operations.http:HttpOperation"
[items.settings]
url = "http://127.0.0.1:{port}"
ResponseTimeout = 2
retry_interval = 0.5
failure_timeout = 120

[[items]]
name = "Counter"
class = "console_ops:CountingOperation"
"""
LATE_ITEM = """
[[items]]
name = "Late"
class = "tests.unit.sample_ops:EchoOperation"
"""
CONSOLE_OPS = '''
"""An operation that counts its on_init calls, one line each, in on_init.count."""
from pathlib import Path

from engine import BusinessOperation, BusinessService

COUNT = Path(__file__).with_name("on_init.count")


class CountingOperation(BusinessOperation):
    def on_init(self):
        with COUNT.open("a") as out:
            out.write("init\\n")

    def on_message(self, request):
        return {"echo": request.to_dict()}


class QuietService(BusinessService):
    def on_process_input(self):
        return None
'''


class Answering:
    """A loopback HTTP server that answers 200, stopped and started again on one port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        class Ok(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Ok)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class Console:
    """The running production: paths, the portal's URL, a sender and a viewer token."""

    def __init__(self, root: Path, base: str, daemon: RunningDaemon, web: Answering) -> None:
        self.root, self.base, self.daemon, self.web = root, base, daemon, web
        self.production = root / "production.toml"
        self.database = f"sqlite:///{root / 'encore.db'}"
        self.sender = encore("token", "create", "bot", "--role", "sender",
                             cwd=root).stdout.strip()
        self.viewer = encore("token", "create", "eye", "--role", "viewer",
                             cwd=root).stdout.strip()

    def send(self, target: str, body: dict[str, Any]) -> requests.Response:
        return requests.post(f"{self.base}/api/v1/messages/{target}", json=body, timeout=10,
                             headers={"Authorization": f"Bearer {self.sender}"})

    def info_events(self, method: str) -> list[str]:
        store = SqlStore(self.database)
        try:
            with store.engine.connect() as conn:
                return list(conn.execute(select(event_log.c.text).where(  # the users':
                    event_log.c.type == "Info", event_log.c.source_method == method,
                    event_log.c.job.is_(None))  # a daemon's own carry its id in job
                    .order_by(event_log.c.id)).scalars())
        finally:
            store.dispose()

    def on_init_count(self) -> int:
        path = self.root / "on_init.count"
        return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    root = tmp_path_factory.mktemp("console")
    web = Answering()
    web.start()
    (root / "console_ops.py").write_text(CONSOLE_OPS)
    (root / "production.toml").write_text(PRODUCTION.format(db=root / "encore.db",
                                                             port=web.port))
    encore("db", "upgrade", cwd=root)
    for name, role in (("olga", "operator"), ("vera", "viewer"), ("adam", "admin")):
        encore("user", "add", name, "--role", role, "--password-stdin", cwd=root,
               stdin=PASSWORD + "\n")
    daemon = RunningDaemon(root)
    port = free_port()
    log = (root / "portal.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "portal", "--port", str(port)],
                            cwd=root, env=cli_env(), stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_portal(base, proc)
        found = Console(root, base, daemon, web)
        wait_until(lambda: found.on_init_count() >= 1, 30, "the daemon started Counter")
        yield found
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        daemon.terminate()
        web.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(UI_TIMEOUT)
    yield context.new_page()
    context.close()


def _shots(console: Console) -> Path:
    """Where the screenshots go: docs/img with ENCORE_SCREENSHOTS=1, else the test's own."""
    folder = DOCS_IMG if os.environ.get("ENCORE_SCREENSHOTS") == "1" else console.root
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_diagram_shows_every_item_and_arrow_and_its_light_follows_the_server(
        page: Any, console: Console) -> None:
    log_in(page, console.base, "olga", "/")
    boxes = page.locator("svg.diagram g[data-item]")
    assert sorted(boxes.nth(i).get_attribute("data-item") for i in range(boxes.count())) == \
        ["Counter", "Orders", "Route", "Web"]
    arrows = page.locator("svg.diagram path.arrow")
    assert sorted((arrows.nth(i).get_attribute("data-from"), arrows.nth(i).get_attribute(
        "data-to")) for i in range(arrows.count())) == \
        [("Orders", "Route"), ("Route", "Counter"), ("Route", "Web")]
    page.wait_for_function("() => document.querySelector(\"svg.diagram g[data-item='Web']\")"
                           ".dataset.light === 'green'", timeout=LIGHT_TIMEOUT)
    assert page.locator("table.daemons td.daemon-items").first.inner_text() == \
        "Route, Web, Counter"  # the names, not <built-in method items of dict …>

    console.web.stop()  # the server stops answering: attempts fail, retried every 0.5 s
    assert console.send("Web", {"method": "GET", "path": "/"}).status_code == 202
    page.wait_for_function("() => document.querySelector(\"svg.diagram g[data-item='Web']\")"
                           ".dataset.light === 'red'", timeout=LIGHT_TIMEOUT)
    assert page.url == console.base + "/"  # no reload: the page refreshed itself
    page.screenshot(path=str(_shots(console) / "console-diagram.png"), full_page=True)

    console.web.start()  # it answers again: the retry succeeds, the light turns green
    page.wait_for_function("() => document.querySelector(\"svg.diagram g[data-item='Web']\")"
                           ".dataset.light === 'green'", timeout=LIGHT_TIMEOUT)
    page.click("svg.diagram g[data-item='Web']")
    page.wait_for_url(f"{console.base}/items/Web")
    assert page.locator("table.servers td").first.inner_text() == \
        f"http://127.0.0.1:{console.web.port}"


def test_a_restart_runs_on_init_again_and_leaves_one_info_event_naming_the_user(
        page: Any, console: Console) -> None:
    before = console.on_init_count()
    log_in(page, console.base, "olga", "/items/Counter")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=restart]")
    page.wait_for_url("**/items/Counter?restarted=1")
    wait_until(lambda: console.on_init_count() == before + 1, 30, "on_init ran again")
    events = console.info_events("restart")
    assert len(events) == 1 and "user 'olga' (operator) through the portal" in events[0]


def test_a_test_send_shows_the_response_and_links_its_trace(page: Any,
                                                             console: Console) -> None:
    log_in(page, console.base, "olga", "/items/Counter")
    wait_until(lambda: requests.get(f"{console.base}/api/v1/items/Counter", timeout=10,
                                     headers={"Authorization": f"Bearer {console.viewer}"})
                .json()["state"] == "green", 30, "Counter runs again after its restart")
    page.fill("form.test textarea[name=body]", json.dumps({"order": 42}))
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=test]")
    page.wait_for_selector("#test-status")
    assert page.inner_text("#test-status") == "Completed"
    assert json.loads(page.inner_text("#test-response")) == {"echo": {"order": 42}}
    trace = page.get_attribute("#test-trace", "href")
    assert trace is not None and trace.startswith("/trace/")
    events = console.info_events("test")
    assert len(events) == 1 and "olga" in events[0]
    # settings and where they came from
    page.goto(f"{console.base}/items/Web")
    assert page.inner_text("tr[data-setting=response_timeout] td:last-child") == "alias"
    assert page.inner_text("tr[data-setting=retry_interval] td:last-child") == "file"
    assert page.inner_text("tr[data-setting=idempotent] td:last-child") == "class default"
    wait_until(lambda: requests.get(f"{console.base}/api/v1/items/Counter", timeout=10,
                                     headers={"Authorization": f"Bearer {console.viewer}"})
                .json()["counters"]["1h"]["completed"] >= 1, 30, "the rollup counted it")
    page.goto(f"{console.base}/items/Counter")
    page.fill("form.test textarea[name=body]", json.dumps({"order": 43}))
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=test]")
    page.wait_for_selector("#test-response")
    page.screenshot(path=str(_shots(console) / "console-item.png"), full_page=True)


def test_the_queue_page_lists_in_delivery_order_and_discards_with_one_event(
        page: Any, console: Console) -> None:
    encore("disable", "Counter", cwd=console.root)
    ids = [console.send("Counter", {"n": n}).json()["id"] for n in range(3)]
    log_in(page, console.base, "olga", "/queues")
    assert page.locator("tr[data-queue=Counter]").count() == 1
    page.goto(f"{console.base}/queues/Counter")
    rows = page.locator("tr[data-queued]")
    assert [int(rows.nth(i).get_attribute("data-queued")) for i in range(rows.count())] == ids
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(f"tr[data-queued='{ids[0]}'] button[data-action=discard]")
    page.wait_for_url(f"{console.base}/queues/Counter")
    rows = page.locator("tr[data-queued]")
    assert [int(rows.nth(i).get_attribute("data-queued")) for i in range(rows.count())] == \
        ids[1:]
    events = console.info_events("discard")
    assert len(events) == 1 and "discarded by user 'olga'" in events[0]
    encore("enable", "Counter", cwd=console.root)


def test_a_viewer_sees_no_action_and_forged_posts_are_refused(page: Any,
                                                              console: Console) -> None:
    restarts = len(console.info_events("restart"))
    log_in(page, console.base, "vera", "/items/Counter")
    assert page.locator("form.action, form.test, button[data-action]").count() == 0
    page.goto(f"{console.base}/queues/Counter")
    assert page.locator("form.action").count() == 0
    statuses = page.evaluate("""async () => {
        const token = document.querySelector("input[name=csrf_token]").value;
        const post = (url, body) => fetch(url, {method: "POST", body: new URLSearchParams(body)})
            .then(r => r.status);
        return [await post("/items/Counter/restart", {csrf_token: token, confirmed: "yes"}),
                await post("/items/Counter/test", {csrf_token: token, confirmed: "yes", body: "{}"}),
                await post("/production/reload", {csrf_token: token, confirmed: "yes"})];
    }""")
    assert statuses == [403, 403, 403]
    page.context.clear_cookies()
    log_in(page, console.base, "olga", "/items/Counter")
    forged = page.evaluate("""async () => {
        const post = (url, body) => fetch(url, {method: "POST", body: new URLSearchParams(body)})
            .then(r => r.status);
        return [await post("/items/Counter/restart", {confirmed: "yes"}),
                await post("/items/Counter/test", {csrf_token: "forged", confirmed: "yes", body: "{}"}),
                await post("/queues/Counter/1/discard", {csrf_token: "", confirmed: "yes"})];
    }""")
    assert forged == [403, 403, 403]
    assert len(console.info_events("restart")) == restarts  # nothing was done


def test_a_standalone_portal_takes_intake_for_an_item_a_sighup_added_within_two_seconds(
        page: Any, console: Console) -> None:
    assert console.send("Late", {"text": "early"}).status_code == 404
    original = console.production.read_text()
    console.production.write_text(original + LATE_ITEM)
    console.daemon.proc.send_signal(signal.SIGHUP)
    started = time.monotonic()
    wait_until(lambda: console.send("Late", {"text": "hi"}).status_code == 202, 2.0,
                "intake accepts the item added by SIGHUP")
    took = time.monotonic() - started
    wait_until(lambda: any(line.startswith("Late ") and "1 daemon, ready" in line
                            for line in encore("status", cwd=console.root).stdout.splitlines()),
                30, "encore status shows Late running on the daemon")
    log_in(page, console.base, "olga", "/")
    page.wait_for_selector("svg.diagram g[data-item='Late']")
    console.production.write_text(original)
    console.daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: console.send("Late", {"text": "gone"}).status_code == 404, 2.0,
                "intake refuses the item removed by SIGHUP")
    print(f"intake accepted the added item {took:.2f} s after the SIGHUP")
