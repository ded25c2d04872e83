"""Hostile or mistaken input to the command line (issue 12, point 7): one line on stderr naming
what is wrong, never a traceback, and nothing enqueued. A value an option cannot take exits
2, as click's usage errors do; a production file or a body that cannot be used exits 1."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.daemon import encore

pytestmark = pytest.mark.cli_in_process

PRODUCTION = """
[production]
name = "BadInput"
database = "sqlite:///{path}"

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"

[[items]]
name = "Http"
class = "operations.http:HttpOperation"
[items.settings]
url = "http://127.0.0.1:9/"
"""
HUGE_ID = str(10**23)  # beyond BIGINT and SQLite's INTEGER
DEEP = "[" * 100_000  # deeper than any JSON decoder recurses
PING = '{"text": "x"}'


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bad-input")
    (path / "production.toml").write_text(PRODUCTION.format(path=path / "e.db"))
    encore("db", "upgrade", cwd=path)
    return path


def one_line(workdir: Path, args: tuple[str, ...], code: int, stdin: str | None = None) -> str:
    """Run ``encore args``: exit ``code``, no output, one ``error:`` line on stderr."""
    result = encore(*args, cwd=workdir, check=False, stdin=stdin)
    assert "Traceback" not in result.stderr, result.stderr
    assert (result.returncode, result.stdout) == (code, ""), result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def nothing_enqueued(workdir: Path) -> bool:
    return encore("messages", "--json", cwd=workdir).stdout == ""


@pytest.mark.parametrize(("args", "says"), [
    # 99999999999999 days back is before the year 1
    (("log", "--since", "99999999999999d"), "--since: '99999999999999d' reaches back before"),
    # ids beyond BIGINT, as an argument and as options
    (("trace", HUGE_ID), f"'ID': {HUGE_ID} is not in the range"),
    (("log", "--message", HUGE_ID), "'--message'"),
    (("log", "--session", HUGE_ID), "'--session'"),
    (("messages", "--session", HUGE_ID), "'--session'"),
    (("resend", HUGE_ID), "'ID'"),
    (("suspend", HUGE_ID), "'ID'"),
    (("discard", HUGE_ID), "'ID'"),
    # a row count beyond BIGINT
    (("log", "--limit", HUGE_ID), "'--limit'"),
    # an age older than the calendar
    (("purge", "--older-than", "99999999999999999d"), "--older-than: '99999999999999999d' is "
                                                      "too long"),
    # waits that are no number of seconds: NaN hung for ever
    (("send", "Echo", "--body", PING, "--wait", "nan"), "'--wait': 'nan' is not a finite number"),
    (("send", "Echo", "--body", PING, "--wait", "inf"), "'--wait': 'inf' is not a finite number"),
    (("send", "Echo", "--body", PING, "--wait", "-1"), "'--wait': '-1' is out of range"),
    # simulated times that are no number of seconds, or past the calendar
    (("simulate", "--server-delay", "inf"), "'--server-delay': 'inf' is not a finite number"),
    (("simulate", "--server-delay", "nan"), "'--server-delay': 'nan' is not a finite number"),
    (("simulate", "--server-delay", "1e300"), "'--server-delay': '1e300' is out of range"),
    (("simulate", "--retry-interval", "-inf"), "'--retry-interval'"),
    (("simulate", "--jitter", "nan"), "'--jitter': 'nan' is not a finite number"),
    (("simulate", "--jitter", "lots"), "'--jitter': 'lots' is not a number"),
    (("simulate", "--servers", HUGE_ID), "'--servers'"),
])
def test_a_value_no_command_can_use_is_one_line_naming_the_option(
        workdir: Path, args: tuple[str, ...], says: str) -> None:
    assert says in one_line(workdir, args, 2)
    assert nothing_enqueued(workdir)


@pytest.mark.parametrize(("args", "stdin", "says"), [
    # 100,000 nested arrays: the decoder gives up
    (("send", "Echo", "--body", DEEP), None, "--body: body nests arrays and objects more than "
                                             "100 levels deep"),
    # 150 levels: decoded, then refused by the depth limit
    (("send", "Http", "--body", json.dumps({"method": "POST", "json": json.loads(
        "[" * 150 + "]" * 150)})), None, "body nests arrays and objects more than 100 levels"),
    # a deep line among good ones: all or nothing
    (("send", "Echo", "--many", "-"), f"{PING}\n{DEEP}\n", "stdin line 2: body nests"),
])
def test_a_body_nested_too_deep_is_one_line_and_nothing_is_enqueued(
        workdir: Path, args: tuple[str, ...], stdin: str | None, says: str) -> None:
    assert says in one_line(workdir, args, 1, stdin=stdin)
    assert nothing_enqueued(workdir)


@pytest.mark.parametrize("args", [("status",), ("run",), ("send", "Echo", "--body", PING)])
def test_a_production_file_that_is_not_utf8_is_one_line(tmp_path: Path,
                                                         args: tuple[str, ...]) -> None:
    (tmp_path / "production.toml").write_bytes(b'[production]\nname = "Caf\xe9"\n')
    line = one_line(tmp_path, args, 1)
    assert "production file 'production.toml' is not UTF-8 text (byte 0xe9 at offset" in line


def test_a_production_file_nested_too_deep_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "production.toml").write_text("[production]\nname = " + DEEP + "\n")
    assert "nests arrays or tables too deep to read" in one_line(tmp_path, ("status",), 1)


@pytest.mark.parametrize(("table", "says"), [
    # past the last TCP port: the metrics endpoint crashed at start
    ("[production]\nmetrics_port = 99999", "item '[production]', setting 'metrics_port': 99999 "
                                           "is out of range; expected integer from 0 to 65535"),
    # the portal served by `encore run`
    ("[portal]\nport = 99999", "item '[portal]', setting 'port': 99999 is out of range"),
])
def test_encore_run_refuses_a_port_past_65535_in_one_line_naming_the_key(
        tmp_path: Path, table: str, says: str) -> None:
    (tmp_path / "production.toml").write_text(
        f"{table}\n[[items]]\nname = \"Echo\"\nclass = \"tests.unit.sample_ops:EchoOperation\"\n")
    assert says in one_line(tmp_path, ("run",), 1)
