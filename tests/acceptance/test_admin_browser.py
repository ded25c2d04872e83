"""The portal's administration (docs/portal.md) in a real headless browser: an admin adds a
user (a short password refused), resets a password, removes a user, creates a token that is
shown once and works, revokes it, and purges old messages after reading the count; each
action leaves exactly one Info event naming the admin. Below admin nobody sees or can post
any of it."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from sqlalchemy import select

from tests.acceptance.browser import (
    UI_TIMEOUT,
    browser,  # noqa: F401 - the fixture
    free_port,
    wait_for_portal,
)
from tests.acceptance.daemon import cli_env, encore
from tests.acceptance.test_portal_browser import PASSWORD, PRODUCTION, Site

pytestmark = pytest.mark.browser

NEW_PASSWORD = "nina's long passphrase"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("admin")
    db = root / "encore.db"
    encore("demo", "--database", f"sqlite:///{db}", cwd=root)  # two finished messages
    (root / "production.toml").write_text(PRODUCTION.format(db=db))
    for name, role in (("ada", "admin"), ("olga", "operator"), ("vera", "viewer"),
                       ("rita", "viewer")):
        encore("user", "add", name, "--role", role, "--password-stdin", cwd=root,
               stdin=PASSWORD + "\n")
    base = Site(f"http://127.0.0.1:{free_port()}")
    base.database = f"sqlite:///{db}"
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


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    context.set_default_timeout(UI_TIMEOUT)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # every confirmation: yes
    yield page
    context.close()


def log_in(page: Any, site: str, name: str, path: str, password: str = PASSWORD) -> None:
    page.goto(site + path)
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", password)
    page.click("form[action='/login'] button[type=submit]")
    page.wait_for_url(site + path)


def portal_events(site: Site, method: str) -> list[Any]:
    from engine.store.models import event_log
    from engine.store.sql import SqlStore

    store = SqlStore(site.database)
    try:
        with store.engine.connect() as conn:
            return conn.execute(select(event_log).where(
                event_log.c.source_method == method, event_log.c.type == "Info")).all()
    finally:
        store.dispose()


def one_event_by_ada(site: Site, method: str, says: str) -> None:
    events = portal_events(site, method)
    assert len(events) == 1, [e.text for e in events]
    assert says in events[0].text and "user 'ada' (admin) through the portal" in events[0].text


def test_an_admin_manages_users_and_each_action_is_one_event(page: Any, site: Site,
                                                            browser: Any) -> None:
    log_in(page, site, "ada", "/admin/users")
    form = page.locator("#add-user")
    form.locator("input[name=name]").fill("nina")
    form.locator("select[name=role]").select_option("operator")
    # the browser's own check (minlength) would stop a short password: bypass it, as a
    # script would, to see the server refuse it
    form.locator("input[name=password]").evaluate("e => e.removeAttribute('minlength')")
    form.locator("input[name=password]").fill("short one")
    form.locator("button[type=submit]").click()
    assert "it needs at least 12" in page.inner_text("main")
    page.goto(f"{site}/admin/users")
    form.locator("input[name=name]").fill("nina")
    form.locator("select[name=role]").select_option("operator")
    form.locator("input[name=password]").fill(NEW_PASSWORD)
    form.locator("button[type=submit]").click()
    page.wait_for_url(f"{site}/admin/users")
    assert page.locator("tr[data-user='nina']").count() == 1
    one_event_by_ada(site, "user_add", "portal user 'nina' added with role operator")

    other = browser.new_context()
    try:
        nina = other.new_page()
        log_in(nina, site, "nina", "/messages", password=NEW_PASSWORD)
        assert "nina" in nina.inner_text("header.top")
    finally:
        other.close()

    row = page.locator("tr[data-user='rita']")
    row.locator("input[name=password]").fill("rita's new long password")
    row.locator("button[data-action=reset]").click()
    page.wait_for_url(f"{site}/admin/users")
    one_event_by_ada(site, "user_password", "password of portal user 'rita' reset")

    page.locator("tr[data-user='nina'] button[data-action=remove]").click()
    page.wait_for_url(f"{site}/admin/users")
    assert page.locator("tr[data-user='nina']").count() == 0
    one_event_by_ada(site, "user_remove", "portal user 'nina' removed")


def test_an_admin_creates_a_token_shown_once_and_revokes_it(page: Any, site: Site) -> None:
    log_in(page, site, "ada", "/admin/tokens")
    page.fill("#create-token input[name=name]", "ci-bot")
    page.select_option("#create-token select[name=role]", "viewer")
    page.click("#create-token button[type=submit]")
    secret = page.inner_text("#new-token").strip()
    assert re.fullmatch(r"enc_\S+", secret)
    auth = {"Authorization": f"Bearer {secret}"}
    assert requests.get(f"{site}/api/v1/status", headers=auth, timeout=10).status_code == 200
    one_event_by_ada(site, "token_create", "created for 'ci-bot' with role viewer")

    page.goto(f"{site}/admin/tokens")
    assert secret not in page.content()  # shown once, never again
    page.locator("tr[data-token] button[data-action=revoke]").last.click()
    page.wait_for_url(f"{site}/admin/tokens")
    one_event_by_ada(site, "token_revoke", "of 'ci-bot' (viewer) revoked")
    time.sleep(1.2)  # a portal remembers a valid token for a second
    assert requests.get(f"{site}/api/v1/status", headers=auth, timeout=10).status_code == 401


def test_an_admin_reads_the_purge_count_then_purges(page: Any, site: Site) -> None:
    log_in(page, site, "ada", "/admin/purge")
    page.fill("input[name=days]", "0")
    page.click("form[action='/admin/purge'] button[type=submit]")
    count = re.search(r"removes (\d+) message", page.inner_text("#purge-count")).group(1)
    assert int(count) >= 2  # the demo's messages, finished
    page.fill("#purge-form input[name=count]", count)
    page.click("#purge-form button[type=submit]")
    assert f"Purged: {count} message(s)" in page.inner_text("#purged")
    one_event_by_ada(site, "purge", f"{count} message(s)")


@pytest.mark.parametrize("who", ["vera", "olga"])  # a viewer, an operator
def test_below_admin_nobody_sees_the_administration_and_a_forged_post_is_refused(
        page: Any, site: Site, who: str) -> None:
    log_in(page, site, who, "/messages")
    assert page.locator("header.top a[href='/admin/users']").count() == 0
    response = page.goto(f"{site}/admin/users")
    assert response.status == 403
    page.goto(f"{site}/account")
    status = page.evaluate("""async () => {
        const token = document.querySelector("input[name=csrf_token]").value;
        const body = new URLSearchParams({csrf_token: token, confirmed: "yes", name: "eve",
                                          role: "admin", password: "a long enough password"});
        const response = await fetch("/admin/users", {method: "POST", body});
        return response.status;
    }""")
    assert status == 403
    assert portal_events(site, "user_add") == [] or all(
        "eve" not in e.text for e in portal_events(site, "user_add"))


def test_a_post_without_the_session_s_csrf_token_is_refused(page: Any, site: Site) -> None:
    log_in(page, site, "ada", "/admin/users")
    status = page.evaluate("""async () => {
        const body = new URLSearchParams({csrf_token: "forged", confirmed: "yes"});
        const response = await fetch("/admin/users/vera/remove", {method: "POST", body});
        return response.status;
    }""")
    assert status == 403
    assert page.locator("tr[data-user='vera']").count() == 1
