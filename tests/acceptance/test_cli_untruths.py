"""The command line's smaller untruths (issue 37, item 9), each against what a user sees:
``send --wait`` exits with its answer, ``simulate --servers`` says only its timeline at the
item's default cooldown, a missing SQLite directory gets one instruction, ``status`` names
the daemons running an inbound service."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.daemon import RunningDaemon, cli_env, encore
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process

ECHO = """
[production]
name = "Untruths"
database = "{url}"
poll_interval = 0.05

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"
"""
AFTER_ANSWER = 0.3  # seconds `send --wait` may work on once it printed its answer
# `encore send --wait` run by a wrapper that notes when the answer is printed and when the
# process's last exit handler has run (registered first, it runs last): the command's own
# work after its answer, without the interpreter's teardown, which a loaded machine stretches
WRAPPER = """
import atexit, sys, time
import click
printed = []
atexit.register(lambda: sys.stderr.write(f"AFTER={time.monotonic() - printed[0]:.4f}\\n"))
echo = click.echo
def noted(message=None, *args, **kwargs):
    echo(message, *args, **kwargs)
    if not kwargs.get("err"):
        printed.append(time.monotonic())
import engine.cli.commands as commands
commands.click.echo = noted
sys.argv = ["encore", "send", "Echo", "--body", '{"text": "x"}', "--wait", "30"]
commands.main()
"""


def test_send_wait_exits_as_soon_as_it_printed_the_answer(tmp_path: Path) -> None:
    (tmp_path / "production.toml").write_text(ECHO.format(url="sqlite:///e.db"))
    encore("db", "upgrade", cwd=tmp_path)
    with RunningDaemon(tmp_path) as daemon:
        encore("send", "Echo", "--body", '{"text": "warm"}', "--wait", "30", cwd=tmp_path)
        result = subprocess.run([sys.executable, "-c", WRAPPER], cwd=tmp_path, env=cli_env(),
                                capture_output=True, text=True, timeout=60)
        assert daemon.terminate() == 0
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["text"] == "X"
    after = float(result.stderr.rsplit("AFTER=", 1)[1].split()[0])
    # the doorbell's receiver used to be joined at its 0.5 s receive timeout
    assert after < AFTER_ANSWER, f"exited {after:.4f} s after its answer"
    print(f"send --wait: {after * 1000:.1f} ms from its answer to its exit")


def test_simulate_with_servers_prints_its_timeline_alone_at_the_default_cooldown(
        tmp_path: Path) -> None:
    result = encore("simulate", "--servers", "3", "--fail-first", "2", cwd=tmp_path)
    assert "attempt 3   server C" in result.stdout
    assert result.stderr == ""  # no wall-clock log lines of servers marked bad
    help_text = " ".join(encore("simulate", "--help", cwd=tmp_path).stdout.split())
    assert "--bad-server-cooldown NUMBER seconds a failed server is skipped" in help_text
    assert "[default: 60.0]" in help_text.split("--bad-server-cooldown")[1]



def test_a_missing_sqlite_directory_gets_one_instruction_from_run_and_from_db_upgrade(
        tmp_path: Path) -> None:
    (tmp_path / "production.toml").write_text(ECHO.format(url="sqlite:///data/e.db"))
    directory = tmp_path / "data"
    said = [encore(*args, cwd=tmp_path, check=False) for args in (("run",), ("db", "upgrade"))]
    assert [r.returncode for r in said] == [1, 1]
    instruction = (f"its directory {directory} does not exist; create it (mkdir -p {directory}),"
                   " then run `encore db upgrade`")
    assert all(instruction in r.stderr for r in said), [r.stderr for r in said]
    directory.mkdir()  # as told: the upgrade then creates the database
    assert "created" in encore("db", "upgrade", cwd=tmp_path).stdout
    assert "production Untruths" in encore("status", cwd=tmp_path).stdout


INBOUND = ECHO + """
[inbound]
port = {port}

[[items]]
name = "Web"
class = "engine.inbound:HttpService"
[items.settings]
routes = [{{method = "POST", path = "/echo", target = "Echo"}}]
mode = "sync"

[[items]]
name = "Poller"
class = "tests.unit.test_service:PingService"
[items.settings]
call_interval = 3600
"""


def status_line(cwd: Path, item: str) -> str:
    lines = encore("status", cwd=cwd).stdout.splitlines()
    return next((line for line in lines if line.startswith(f"{item} ")), "")


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_status_names_the_daemon_serving_an_inbound_service_and_the_leader_for_a_service(
        tmp_path: Path, dialect: str) -> None:
    from engine.store import queries
    from engine.store.sql import SqlStore
    from tests.conftest import postgres_url, reset_postgres
    from tests.integration.inbound_support import free_port

    url = f"sqlite:///{tmp_path / 'e.db'}" if dialect == "sqlite" else postgres_url()
    if dialect == "postgresql":
        reset_postgres(url)
    (tmp_path / "production.toml").write_text(INBOUND.format(url=url, port=free_port()))
    encore("db", "upgrade", cwd=tmp_path)
    store = SqlStore(url)
    with RunningDaemon(tmp_path) as daemon:
        wait_until(lambda: queries.daemons(store), 60, "the daemon to register")
        (daemon_id,) = [d["id"] for d in queries.daemons(store)]
        wait_until(lambda: f"1 daemon, ready: {daemon_id}" in status_line(tmp_path, "Web"),
                   60, "status to name the daemon serving Web")
        assert "no daemon reports it" not in encore("status", cwd=tmp_path).stdout
        assert f"1 daemon, ready: {daemon_id}" in status_line(tmp_path, "Echo")
        wait_until(lambda: f"1 daemon, ready: {daemon_id} (the leader, on its schedule)"
                   in status_line(tmp_path, "Poller"), 60, "the business service on the leader")
        assert daemon.terminate() == 0
    store.dispose()
