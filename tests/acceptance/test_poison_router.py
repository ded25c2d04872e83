"""A router rule cannot freeze a daemon (issue 22, point 2; docs/security.md "Router rules"):
``encore run`` routes a body that sends Python's backtracking ``re`` into minutes of work
(``^(a+)+$`` against 29 a's and a "!") at once, and refuses to start a production whose rule
RE2 cannot run, naming the item, the rule and the pattern."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.acceptance.daemon import RunningDaemon, encore
from tests.servers import HttpTestServer, respond
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemon is a process; the commands need not be

PRODUCTION = """
[production]
name = "Regex"
database = "sqlite:///{db}"
poll_interval = 0.05

[[items]]
name = "Router"
class = "engine.router:Router"
pool_size = 2
[items.settings]
rules = [{{field = "json.text", matches = '{pattern}', target = "Matched"}}]
default_target = "Other"
timeout = 30

[[items]]
name = "Matched"
class = "operations.http:HttpOperation"
[items.settings]
url = "{url}"

[[items]]
name = "Other"
class = "operations.http:HttpOperation"
[items.settings]
url = "{url}"
"""


def write(tmp_path: Path, pattern: str, url: str) -> None:
    (tmp_path / "production.toml").write_text(
        PRODUCTION.format(db=tmp_path / "e.db", pattern=pattern, url=url))


def send_and_wait(tmp_path: Path, text: str) -> dict[str, object]:
    body = json.dumps({"method": "POST", "path": "/pay", "json": {"text": text}})
    out = encore("send", "Router", "--body", body, "--wait", "25", "--json", cwd=tmp_path,
                 check=False).stdout
    return json.loads(out)


def test_a_catastrophic_pattern_routes_at_once_in_a_real_daemon(tmp_path: Path) -> None:
    routes = {"POST /pay": respond(200, "paid")}
    with HttpTestServer(routes) as server:
        write(tmp_path, "^(a+)+$", server.url)
        encore("db", "upgrade", cwd=tmp_path)
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: "production Regex started" in daemon.output, 30, "the start")
            started = time.monotonic()
            evil = send_and_wait(tmp_path, "a" * 29 + "!")  # Python's re: minutes, GIL held
            seconds = time.monotonic() - started
            good = send_and_wait(tmp_path, "a" * 29)
            assert daemon.terminate() == 0
        hits = [json.loads(r.body)["text"] for r in server.requests]
    assert evil["status"] == "Completed" and good["status"] == "Completed"
    # generous on a loaded machine: `encore send` itself takes a second or two to start
    assert seconds < 10, seconds
    assert hits == ["a" * 29 + "!", "a" * 29]
    lines = encore("trace", str(evil["id"]), cwd=tmp_path).stdout
    assert "Router -> Other" in lines and "Router -> Matched" not in lines
    lines = encore("trace", str(good["id"]), cwd=tmp_path).stdout
    assert "Router -> Matched" in lines


def test_a_backreference_is_refused_at_start_naming_the_rule(tmp_path: Path) -> None:
    write(tmp_path, r"^(\w+) \1$", "http://127.0.0.1:9")
    encore("db", "upgrade", cwd=tmp_path)
    with RunningDaemon(tmp_path) as daemon:
        code = daemon.wait(30)
    text = daemon.output
    assert code != 0, text
    assert "item 'Router', setting 'rules': rule 1 (rules[0])" in text, text
    assert r"bad regular expression '^(\\w+) \\1$'" in text, text
    assert "no backreferences" in text and "Traceback" not in text
