"""What an ``encore`` command imports: commands that do not run the daemon leave the SOAP
and HTTP stacks, the scheduler, the adapters, the operation classes and Alembic alone —
except the one class ``encore send`` needs to check a body, and the item classes ``encore
status`` checks the settings against. Checked on ``sys.modules`` of a
real process, not on timings."""
from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import engine
from engine.cli.commands import LAZY_COMMANDS, main
from tests.acceptance.daemon import cli_env, encore

HEAVY = ("zeep", "requests", "apscheduler", "alembic", "adapters.base", "adapters.http",
         "adapters.soap", "operations.http", "operations.soap", "engine.host",
         "engine.runtime.daemon",
         "engine.delivery.worker")
PRODUCTION = """
[production]
name = "Imports"
database = "sqlite:///{db}"

[[items]]
name = "Payments"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "http://127.0.0.1:9/?wsdl"

[[items]]
name = "Orders"
class = "operations.http:HttpOperation"
[items.settings]
url = "http://127.0.0.1:9/api"
"""
RUN = """
import json, sys
import engine.cli.commands
try:
    engine.cli.commands.main(sys.argv[1:], standalone_mode=False)
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
"""


def heavy_modules_after(cwd: Path, *args: str) -> set[str]:
    """The HEAVY modules loaded once ``encore ARGS`` has run, in a process of its own."""
    result = subprocess.run([sys.executable, "-c", RUN.format(heavy=HEAVY), *args], cwd=cwd,
                            env=cli_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stderr.splitlines()[-1]))


@pytest.fixture
def production(tmp_path: Path) -> Path:
    (tmp_path / "production.toml").write_text(PRODUCTION.format(db=tmp_path / "e.db"))
    encore("db", "upgrade", cwd=tmp_path)
    return tmp_path


def test_importing_the_command_line_loads_none_of_the_heavy_modules(tmp_path: Path) -> None:
    assert heavy_modules_after(tmp_path, "--help") == set()


@pytest.mark.parametrize("args", [
    ("log",),  # only the database
    ("messages", "--json"),  # only the database
    ("suspended",),  # an operator command
])
def test_commands_that_only_read_the_database_import_no_item_class(
        production: Path, args: tuple[str, ...]) -> None:
    assert heavy_modules_after(production, *args) == set()


def test_status_imports_the_item_classes_to_warn_but_not_the_daemon(production: Path) -> None:
    """``encore status`` validates every item's settings against its class, to warn about
    what ``encore run`` would refuse; it runs nothing, so it imports none of the rest."""
    loaded = heavy_modules_after(production, "status")
    assert {"operations.http", "operations.soap"} <= loaded
    assert not loaded & {"apscheduler", "alembic", "engine.runtime.daemon",
                         "engine.delivery.worker"}


def test_send_imports_its_targets_class_and_no_other(production: Path) -> None:
    loaded = heavy_modules_after(production, "send", "Orders", "--body",
                                 '{"method": "GET", "path": "/x"}')
    assert {"operations.http", "engine.host"} <= loaded
    assert not loaded & {"zeep", "operations.soap", "apscheduler", "alembic",
                         "engine.runtime.daemon"}


def test_send_to_an_sqlite_database_imports_neither_sqlalchemy_nor_the_store(
        production: Path) -> None:
    """``encore send`` runs the hot path's statements on a bare driver connection
    (engine.store.lite): SQLAlchemy alone costs a third of a second to import."""
    # a module engine.cli.lazy placed in sys.modules but never read is no import
    script = RUN.replace("if m in sys.modules", "if type(sys.modules.get(m)).__name__ "
                         "not in ('NoneType', '_LazyModule')").format(
        heavy=("sqlalchemy", "engine.store.sql", "engine.store.models", "alembic", "psycopg"))
    result = subprocess.run([sys.executable, "-c", script, "send", "Orders", "--body",
                             '{"method": "GET", "path": "/x"}'], cwd=production,
                            env=cli_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stderr.splitlines()[-1]) == []
    listed = encore("messages", "--json", cwd=production).stdout
    assert '"target": "Orders"' in listed and '"status": "Queued"' in listed


def test_send_still_checks_the_body_against_the_targets_class(production: Path) -> None:
    result = encore("send", "Orders", "--body", '{"method": "GET", "path": "/x", "jsn": 1}',
                    cwd=production, check=False)
    assert result.returncode == 1 and "jsn" in result.stderr, result.stderr


def test_the_lazy_commands_are_listed_by_their_own_summaries() -> None:
    for name, (target, summary) in LAZY_COMMANDS.items():
        command = pkgutil.resolve_name(target)
        assert command.name == name and command.get_short_help_str(limit=500) == summary
    listing = CliRunner().invoke(main, ["--help"]).output
    assert all(name in listing for name in LAZY_COMMANDS)


def test_a_lazy_command_runs() -> None:
    result = CliRunner().invoke(main, ["simulate", "--response-timeout", "7",
                                       "--retry-interval", "10", "--failure-timeout", "30",
                                       "--server-delay", "8", "--json"])
    assert result.exit_code == 0, result.output
    assert [e["event"] for e in json.loads(result.output)].count("attempt_start") == 4


def test_the_public_api_is_imported_on_first_use() -> None:
    from engine import BusinessOperation, BusinessService, Message
    from engine.host import BusinessOperation as Defined

    assert BusinessOperation is Defined and Message and BusinessService
    assert set(engine.__all__) <= set(dir(engine))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        engine.Nope  # noqa: B018
