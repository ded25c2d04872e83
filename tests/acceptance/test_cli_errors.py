"""First-hour mistakes with the database, through the real command line: each is one plain
line on stderr saying what to run, exit status 1, and never a traceback (docs/security.md)."""
from __future__ import annotations

import socket
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from engine.errors import StoreError
from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import encore
from tests.conftest import postgres_url

pytestmark = pytest.mark.cli_in_process

PASSWORD = "pg-Pa55-not-to-be-printed"
PRODUCTION = """
[production]
name = "FirstHour"
database = "{url}"

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"
"""

COMMANDS = [
    ("send", "Echo", "--body", '{"text": "hi"}'),  # enqueue
    ("status",),  # items and daemons
    ("log",),  # the event log
    ("messages",),  # message headers
]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def production(tmp_path: Path, url: str) -> Path:
    (tmp_path / "production.toml").write_text(PRODUCTION.format(url=url))
    return tmp_path


def one_error_line(tmp_path: Path, *args: str) -> str:
    result = encore(*args, cwd=tmp_path, check=False)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("args", COMMANDS)
def test_a_database_without_tables_asks_for_db_upgrade(tmp_path: Path, args) -> None:
    sqlite3.connect(tmp_path / "e.db").close()  # the file exists, the tables do not
    production(tmp_path, f"sqlite:///{tmp_path / 'e.db'}")
    line = one_error_line(tmp_path, *args)
    assert "has no Encore tables; run `encore db upgrade`" in line


@pytest.mark.parametrize("args", COMMANDS)
def test_a_missing_sqlite_file_asks_for_db_upgrade_and_is_not_created(tmp_path: Path,
                                                                      args) -> None:
    production(tmp_path, f"sqlite:///{tmp_path / 'e.db'}")
    assert "does not exist yet; run `encore db upgrade`" in one_error_line(tmp_path, *args)
    assert not (tmp_path / "e.db").exists()
    encore("db", "upgrade", cwd=tmp_path)  # what the sentence says to run, and it works
    assert encore(*args, cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("args", [*COMMANDS, ("db", "upgrade")])
def test_an_unreachable_postgresql_is_named_with_its_password_hidden(tmp_path: Path,
                                                                     args) -> None:
    port = closed_port()
    production(tmp_path, f"postgresql://encore:{PASSWORD}@127.0.0.1:{port}/encore")
    line = one_error_line(tmp_path, *args)
    assert f"cannot connect to the database postgresql://encore:***@127.0.0.1:{port}/encore"\
        in line
    assert PASSWORD not in line


def test_a_database_url_that_does_not_parse_is_one_line_without_the_url(tmp_path: Path) -> None:
    production(tmp_path, f"postgresql://encore:{PASSWORD}@db:port/encore")
    line = one_error_line(tmp_path, "status")
    assert "not a valid SQLAlchemy URL" in line and PASSWORD not in line


def test_the_cli_queries_raise_store_errors_without_sql(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'e.db'}")  # no tables
    try:
        for query in (lambda: queries.events(store, queries.EventFilter()),
                      lambda: queries.messages(store), lambda: queries.queue_stats(store),
                      lambda: queries.daemons(store)):
            with pytest.raises(StoreError, match="no such table") as caught:
                query()
            assert "SELECT" not in str(caught.value) and "\n" not in str(caught.value)
    finally:
        store.dispose()


def upgraded(tmp_path: Path, extra: str = "", cls: str = "EchoOperation") -> SqlStore:
    """An upgraded SQLite production with one item of ``cls`` and one message queued for it."""
    url = f"sqlite:///{tmp_path / 'e.db'}"
    text = PRODUCTION.format(url=url).replace("EchoOperation", cls)
    (tmp_path / "production.toml").write_text(text.replace("[[items]]", extra + "\n[[items]]"))
    encore("db", "upgrade", cwd=tmp_path)
    store = SqlStore(url)
    store.enqueue(target="Echo", body_class="tests.unit.sample_ops:Ping", body='{"text": "x"}')
    return store


def assert_nothing_started(store: SqlStore) -> None:
    """No daemon registered, the queued message untouched: no attempt can have begun."""
    try:
        assert queries.daemons(store) == []
        (message,) = queries.messages(store)
        assert (message["status"], message["attempts"]) == ("Queued", 0)
    finally:
        store.dispose()


def test_a_metrics_port_in_use_stops_encore_run_with_one_line_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        store = upgraded(tmp_path, f"metrics_port = {port}\n")
        line = one_error_line(tmp_path, "run")
    assert f"127.0.0.1:{port}: port {port} is already in use" in line
    assert "metrics_port" in line
    assert_nothing_started(store)


@pytest.mark.parametrize(("cls", "why"), [
    # on_init raises
    ("BrokenInitOperation", "failed to start (on_init): RuntimeError: the ledger file is locked"),
    # credentials that name nothing set
    ("StubOperation\"\n[items.settings]\ncredentials = \"nobody", "credentials 'nobody' not found"),
])
def test_an_item_that_cannot_start_stops_encore_run_with_one_line_naming_it(
        tmp_path: Path, cls: str, why: str) -> None:
    store = upgraded(tmp_path, cls=cls)
    line = one_error_line(tmp_path, "run")
    assert line.startswith("error: item 'Echo'") and why in line, line
    assert_nothing_started(store)


@pytest.mark.parametrize("args", [("run",), ("db", "upgrade")])
def test_a_postgresql_role_that_does_not_exist_is_one_line_with_its_password_hidden(
        tmp_path: Path, args: tuple[str, ...]) -> None:
    server = make_url(postgres_url())
    url = f"postgresql+psycopg://nosuchrole:{PASSWORD}@{server.host}:{server.port or 5432}/postgres"
    production(tmp_path, url)
    line = one_error_line(tmp_path, *args)
    assert f"cannot connect to the database postgresql+psycopg://nosuchrole:***@{server.host}" \
        in line
    assert 'role "nosuchrole" does not exist' in line and PASSWORD not in line
