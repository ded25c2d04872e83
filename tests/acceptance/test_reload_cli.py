"""``encore reload`` against a running daemon: it signals the production's daemons on this
host and reports what each did — reloaded, or refused with the reason — from the event that
ends each reload; with no daemon here it says so and exits 1."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.conftest import postgres_url, reset_postgres
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemon is a process; the commands need not be

START = 60  # seconds a daemon may take to start on a loaded machine
HEAD = '[production]\nname = "ReloadCli"\ndatabase = "{url}"\npoll_interval = 0.05\n'
ECHO = '\n[[items]]\nname = "{name}"\nclass = "tests.unit.sample_ops:EchoOperation"\n'
NO_URL = '\n[[items]]\nname = "NoUrl"\nclass = "operations.http:HttpOperation"\n'


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'e.db'}"
    found = postgres_url()
    reset_postgres(found)
    return found


def test_reload_reports_each_daemon_reloaded_or_refused_with_the_reason(
        tmp_path: Path, url: str) -> None:
    path = tmp_path / "production.toml"
    path.write_text(HEAD.format(url=url) + ECHO.format(name="First"))
    encore("db", "upgrade", cwd=tmp_path)
    store = SqlStore(url)
    try:
        with RunningDaemon(tmp_path) as daemon:
            wait_until(lambda: queries.daemons(store), START, "the daemon to register")
            (daemon_id,) = [d["id"] for d in queries.daemons(store)]

            path.write_text(HEAD.format(url=url) + ECHO.format(name="First")
                            + ECHO.format(name="Second"))
            applied = encore("reload", cwd=tmp_path)
            assert applied.stdout.strip() == (
                f"daemon {daemon_id} (pid {daemon.proc.pid}): reloaded: production reloaded "
                f"from {path} by daemon {daemon_id}: started Second; 2 item(s) running")
            assert "Second" in encore("status", cwd=tmp_path).stdout

            path.write_text(HEAD.format(url=url) + ECHO.format(name="First") + NO_URL)
            refused = encore("reload", cwd=tmp_path, check=False)
            assert refused.returncode == 1
            assert refused.stdout.startswith(f"daemon {daemon_id} (pid {daemon.proc.pid}): "
                                             "refused: reload refused")
            assert "item 'NoUrl', setting 'url'" in refused.stdout
            assert daemon.terminate() == 0
        gone = encore("reload", cwd=tmp_path, check=False)
        assert gone.returncode == 1
        assert "error: no daemon of production ReloadCli runs on this host" in gone.stderr
    finally:
        store.dispose()
