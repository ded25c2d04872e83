"""One production file, two environments: each environment's defaults file names the URL its
daemon delivers to; the portal (item page and API) and ``encore check`` say where each value
came from; a reload re-reads the defaults file; a misspelt setting in it is refused naming
the file and the row."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import requests

from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.integration.inbound_support import free_port
from tests.portal_support import PASSWORD, form_token
from tests.servers import HttpTestServer, respond
from tests.waiting import answers, wait_until

pytestmark = pytest.mark.cli_in_process  # the daemon is a process; the commands need not be

PRODUCTION = """
[production]
name = "Shop"
database = "sqlite:///shop.db"
defaults = "test/defaults.toml"
poll_interval = 0.05

[portal]
port = {port}

[[items]]
name = "Orders"
class = "operations.http:HttpOperation"
[items.settings]
retry_interval = 1
"""
ROWS = """
[[defaults]]
production = "*"
item = "*"
class = "*"
setting = "url"
value = "http://127.0.0.1:9/nobody"
description = "a fallback the more specific row below outranks"

[[defaults]]
production = "Shop"
item = "Orders"
class = "operations.http:HttpOperation"
setting = "url"
value = "{url}"
"""
BODY = json.dumps({"method": "POST", "path": "/orders", "json": {"sku": 1}})
SOURCE = "system default (defaults.toml, row 2)"


def _environment(directory: Path, url: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "defaults.toml").write_text(ROWS.format(url=url))
    return directory / "defaults.toml"


def _delivered(store: SqlStore, message_id: int) -> bool:
    row = store.get_message(message_id)
    return row is not None and row.status == "Completed"


def _send(tmp_path: Path, env: dict[str, str] | None = None) -> int:
    return int(encore("send", "Orders", "--body", BODY, cwd=tmp_path, env=env).stdout)


def _item_page(base: str) -> str:
    session = requests.Session()
    page = session.get(f"{base}/login", timeout=10)
    session.post(f"{base}/login", data={"username": "ops", "password": PASSWORD, "next": "/",
                                        "csrf_token": form_token(page.text)}, timeout=10)
    return session.get(f"{base}/items/Orders", timeout=10).text


def test_each_environment_delivers_to_the_url_its_defaults_file_names(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "production.toml").write_text(PRODUCTION.format(port=port))
    route = {"POST /orders": respond(200, '{"ok": true}', content_type="application/json")}
    with HttpTestServer(route) as test, HttpTestServer(route) as live:
        test_defaults = _environment(tmp_path / "test", test.url)
        live_defaults = _environment(tmp_path / "live", live.url)
        live_env = {"ENCORE_DEFAULTS": str(live_defaults),
                    "ENCORE_DATABASE_URL": f"sqlite:///{tmp_path / 'live.db'}"}
        encore("db", "upgrade", cwd=tmp_path)
        encore("db", "upgrade", cwd=tmp_path, env=live_env)
        checked = encore("check", cwd=tmp_path).stdout
        assert f"defaults {test_defaults}: 2 rows for this production" in checked
        assert f'  url = "{test.url}"  ({SOURCE})' in checked, checked
        assert '  retry_interval = 1  (file)' in checked, checked
        encore("user", "add", "ops", "--role", "viewer", "--password-stdin", cwd=tmp_path,
               stdin=PASSWORD + "\n")
        token = encore("token", "create", "bot", "--role", "viewer", cwd=tmp_path).stdout.strip()
        store = SqlStore(f"sqlite:///{tmp_path / 'shop.db'}")
        base = f"http://127.0.0.1:{port}"
        with RunningDaemon(tmp_path) as daemon:
            first = _send(tmp_path)
            wait_until(lambda: _delivered(store, first), 30, "the test environment's delivery")
            assert [r.path for r in test.requests] == ["/orders"] and live.requests == []
            wait_until(lambda: answers(f"{base}/healthz") or answers(f"{base}/login"), 30,
                       "the portal")
            api = requests.get(f"{base}/api/v1/items/Orders", timeout=10,
                               headers={"Authorization": f"Bearer {token}"}).json()
            assert api["settings"]["url"] == {"value": test.url, "source": SOURCE}
            assert api["settings"]["retry_interval"]["source"] == "file"
            page = _item_page(base)
            assert "source-system-default" in page and SOURCE in page

            # a reload re-reads the defaults file: the test environment now names live
            test_defaults.write_text(ROWS.format(url=live.url).replace(
                'production = "Shop"', 'production = "*"'))  # its source changes rank too
            daemon.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: requests.get(
                f"{base}/api/v1/items/Orders", timeout=10,
                headers={"Authorization": f"Bearer {token}"}).json()["settings"]["url"][
                "value"] == live.url, 30, "the portal to show the reloaded default")
            second = _send(tmp_path)
            wait_until(lambda: _delivered(store, second), 30, "the delivery after the reload")
            assert [r.path for r in live.requests] == ["/orders"] and len(test.requests) == 1
            assert daemon.terminate() == 0
        store.dispose()

        # the live environment: the same production file, ENCORE_DEFAULTS naming its own
        live_store = SqlStore(live_env["ENCORE_DATABASE_URL"])
        with RunningDaemon(tmp_path, env=live_env) as daemon:
            third = _send(tmp_path, live_env)
            wait_until(lambda: _delivered(live_store, third), 30, "the live delivery")
            assert daemon.terminate() == 0
        assert len(live.requests) == 2 and len(test.requests) == 1
        live_store.dispose()


def test_a_misspelt_setting_in_the_defaults_file_is_refused_naming_the_file_and_row(
        tmp_path: Path) -> None:
    (tmp_path / "production.toml").write_text(PRODUCTION.format(port=free_port()))
    defaults = _environment(tmp_path / "test", "http://127.0.0.1:9/")
    defaults.write_text(defaults.read_text().replace('setting = "url"\nvalue = "http://127.0.0.1'
                                                     ':9/"\n', 'setting = "urll"\nvalue = '
                                                     '"http://127.0.0.1:9/"\n'))
    encore("db", "upgrade", cwd=tmp_path)
    checked = encore("check", cwd=tmp_path, check=False)
    assert checked.returncode == 1
    assert (f"Orders: not ready: defaults file {str(defaults)!r}, row 2: setting 'urll': "
            "unknown setting of item 'Orders'. Did you mean 'url'?") in checked.stdout, \
        checked.stdout
    run = encore("run", cwd=tmp_path, check=False)
    assert run.returncode != 0 and f"{str(defaults)!r}, row 2" in run.stderr, run.stderr
