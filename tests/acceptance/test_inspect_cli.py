"""``encore log``, ``messages``, ``trace`` and ``status`` on a database filled by a real run."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.servers import HttpTestServer, respond
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process

PRODUCTION = """
[production]
name = "Inspect"
database = "{url}"
poll_interval = 0.05

[[items]]
name = "Flaky"
class = "operations.http:HttpOperation"
[items.settings]
url = "{http}"
response_timeout = 0.3
retry_interval = 1.0
failure_timeout = 2.0

[[items]]
name = "Fine"
class = "operations.http:HttpOperation"
[items.settings]
url = "{http}"
"""


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, int]]:
    """A database after a real run: one message that gave up, one that completed. Flaky's
    attempts start at 0, 1 and 2 s and fail 0.3 s later; a failure 2 s or more after the
    first start gives up. So three attempts: the second's failure may come 0.7 s late (it
    had 0.3 s, and on a busy machine a late one left two), and the third's can never come
    before 2.3 s."""
    tmp = tmp_path_factory.mktemp("inspect")
    url = f"sqlite:///{tmp / 'e.db'}"
    routes = {"/slow": respond(200, "late", delay=0.5), "/ok": respond(200, "fine")}
    with HttpTestServer(routes) as http:
        (tmp / "production.toml").write_text(PRODUCTION.format(url=url, http=http.url))
        encore("db", "upgrade", cwd=tmp)
        failed = int(encore("send", "Flaky", "--body", '{"method": "GET", "path": "/slow"}',
                            cwd=tmp).stdout)
        ok = int(encore("send", "Fine", "--body", '{"method": "GET", "path": "/ok"}',
                        cwd=tmp).stdout)
        store = SqlStore(url)
        with RunningDaemon(tmp) as daemon:
            wait_until(lambda: store.get_message(failed).status == "Error"
                       and store.get_message(ok).status == "Completed", 30, "the run")
            assert daemon.terminate() == 0
        store.dispose()
    yield tmp, failed, ok


def test_log_prints_aligned_columns_and_filters_by_type_and_item(filled) -> None:
    tmp, failed, _ = filled
    text = encore("log", "--type", "Error", "--item", "Flaky", cwd=tmp).stdout.splitlines()
    assert text[0].split()[:4] == ["id", "time", "(UTC)", "type"]
    assert len(text) == 3 and all(" Error " in line for line in text[1:])
    rows = [json.loads(line) for line in encore("log", "--json", "--message", str(failed),
                                                "--type", "Error", cwd=tmp).stdout.splitlines()]
    assert [r["message_id"] for r in rows] == [failed, failed]
    assert "FailureTimeout of 2 seconds exceeded" in rows[-1]["text"]
    assert encore("log", "--type", "Error", "--item", "Fine", cwd=tmp).stdout == ""


def test_log_since_and_limit(filled) -> None:
    tmp, _, _ = filled
    assert len(encore("log", "--since", "10m", "--json", cwd=tmp).stdout.splitlines()) >= 2
    assert encore("log", "--since", "2999-01-01T00:00:00", "--json", cwd=tmp).stdout == ""
    assert len(encore("log", "--limit", "1", "--json", cwd=tmp).stdout.splitlines()) == 1
    bad = encore("log", "--since", "yesterday", cwd=tmp, check=False)
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_messages_shows_status_attempts_and_error(filled) -> None:
    tmp, failed, ok = filled
    rows = {r["id"]: r for r in map(json.loads, encore("messages", "--json",
                                                         cwd=tmp).stdout.splitlines())}
    assert rows[failed]["status"] == "Error" and rows[failed]["attempts"] == 3
    assert rows[ok]["status"] == "Completed"
    assert rows[rows[ok]["corresponding_id"]]["kind"] == "response"
    table = encore("messages", "--status", "Error", cwd=tmp).stdout
    assert "FailureTimeout" in table and "Completed" not in table


def test_trace_lays_out_every_attempt_on_a_time_line(filled) -> None:
    tmp, failed, _ = filled
    lines = encore("trace", str(failed), cwd=tmp).stdout.splitlines()
    sent = [line for line in lines if "sent to" in line]
    assert len(sent) == 3
    offsets = [float(line.split("s ", 1)[0]) for line in sent]
    assert offsets == sorted(offsets) and 0.3 < offsets[1] - offsets[0] < 2.0
    assert "Error: giving up" in lines[-1] or "giving up" in lines[-2]
    missing = encore("trace", "99999", cwd=tmp, check=False)
    assert missing.returncode == 1 and "no message or session" in missing.stderr


def test_status_shows_items_and_their_last_error(filled) -> None:
    tmp, _, _ = filled
    out = encore("status", cwd=tmp).stdout
    flaky = next(line for line in out.splitlines() if line.startswith("Flaky"))
    assert "FailureTimeout" in flaky
    assert "no daemon running" in out


def test_log_follow_prints_new_events_as_they_come(filled) -> None:
    import select
    import subprocess
    import sys

    from tests.acceptance.daemon import cli_env
    tmp, _, _ = filled
    store = SqlStore(f"sqlite:///{tmp / 'e.db'}")
    follower = subprocess.Popen([sys.executable, "-m", "engine.cli", "log", "--follow", "--json",
                                 "--type", "Alert"], cwd=tmp, env=cli_env(),
                                stdout=subprocess.PIPE, text=True)

    def next_line() -> dict:
        ready, _, _ = select.select([follower.stdout], [], [], 15)
        assert ready, "encore log --follow printed nothing"
        return json.loads(follower.stdout.readline())

    try:
        store.events.write("Alert", "first", config_name="Fine")
        assert next_line()["text"] == "first"
        store.events.write("Alert", "second", config_name="Fine")  # surely after it started
        assert next_line()["text"] == "second"
    finally:
        follower.terminate()
        follower.wait(10)
        follower.stdout.close()
        store.dispose()
