"""The classes a production names, imported the way a user runs Encore: the installed
``encore`` script, from another directory, without PYTHONPATH (engine/config/user_modules.py).

The README's example class lives beside the production file and is found there; a package
of the user's named like one of Encore's (``operations``) never hides Encore's, and an item
that names it gets an error saying why."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.store.sql import SqlStore
from tests.acceptance.daemon import ROOT, cli_env
from tests.servers import HttpTestServer, respond
from tests.waiting import wait_until

ENCORE = Path(sys.executable).with_name("encore")  # the console script pip installed
README_EXAMPLE = re.search(r"## An operation of your own\n\n```python\n(.*?)```",
                           (ROOT / "README.md").read_text(), re.S)
HIDDEN = 'raise ImportError("the user\'s operations package was imported")\n'
PRODUCTION = """
[production]
name = "Shop"
database = "sqlite:///{db}"
poll_interval = 0.05

[[items]]
name = "{name}"
class = "{cls}"
[items.settings]
url = "{url}"
"""


def script_env() -> dict[str, str]:
    """The user's environment: no PYTHONPATH, no production or database override."""
    drop = {"PYTHONPATH", "ENCORE_DATABASE_URL", "ENCORE_PRODUCTION"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def encore(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not ENCORE.exists():
        pytest.skip(f"needs the installed `encore` script ({ENCORE})")
    return subprocess.run([str(ENCORE), *args], cwd=cwd, env=script_env(), capture_output=True,
                          text=True, timeout=60)


def app(tmp_path: Path, *, name: str, cls: str, url: str = "http://127.0.0.1:9/") -> Path:
    """``tmp_path/app/production.toml`` (returned) and an empty directory ``elsewhere``."""
    (tmp_path / "elsewhere").mkdir()
    directory = tmp_path / "app"
    directory.mkdir()
    path = directory / "production.toml"
    path.write_text(PRODUCTION.format(db=directory / "e.db", name=name, cls=cls, url=url))
    return path


def package(root: Path, name: str, files: dict[str, str]) -> None:
    (root / name).mkdir()
    for filename, text in {"__init__.py": "", **files}.items():
        (root / name / filename).write_text(text)


def test_the_readme_example_class_is_found_beside_the_production_file(tmp_path: Path) -> None:
    assert README_EXAMPLE is not None
    with HttpTestServer({"POST /charges": respond(200, "ch_1")}) as server:
        path = app(tmp_path, name="Charges", cls="mypackage.charges:ChargeCard", url=server.url)
        package(path.parent, "mypackage", {"charges.py": README_EXAMPLE[1]})
        elsewhere = tmp_path / "elsewhere"
        assert encore("-p", str(path), "db", "upgrade", cwd=elsewhere).returncode == 0
        sent = encore("-p", str(path), "send", "Charges", "--body",
                      '{"order": "A1", "cents": 250}', cwd=elsewhere)
        assert sent.returncode == 0, sent.stderr  # the body checked against Charge
        bad = encore("-p", str(path), "send", "Charges", "--body", '{"order": "A1"}',
                     cwd=elsewhere)
        assert bad.returncode == 1 and "cents" in bad.stderr
        store = SqlStore(f"sqlite:///{path.parent / 'e.db'}")
        daemon = subprocess.Popen([str(ENCORE), "-p", str(path), "run"], cwd=elsewhere,
                                  env=script_env(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            mid = int(sent.stdout)
            wait_until(lambda: store.get_message(mid).status == "Completed", 30,
                       "the README's operation to deliver the message")
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(30) == 0
            store.dispose()
    assert json.loads(server.requests[0].body) == {"order": "A1", "cents": 250}


def test_a_user_package_named_operations_does_not_hide_encores(tmp_path: Path) -> None:
    path = app(tmp_path, name="Web", cls="operations.http:HttpOperation")
    package(path.parent, "operations", {"__init__.py": HIDDEN})
    elsewhere = tmp_path / "elsewhere"
    assert encore("-p", str(path), "db", "upgrade", cwd=elsewhere).returncode == 0
    sent = encore("-p", str(path), "send", "Web", "--body", '{"method": "GET", "path": "/"}',
                  cwd=elsewhere)
    assert sent.returncode == 0, sent.stderr


def test_an_item_in_a_user_package_named_operations_gets_an_error_saying_why(
        tmp_path: Path) -> None:
    path = app(tmp_path, name="Charges", cls="operations.charges:ChargeCard")
    package(path.parent, "operations", {"charges.py": "raise AssertionError('imported')\n"})
    elsewhere = tmp_path / "elsewhere"
    assert encore("-p", str(path), "db", "upgrade", cwd=elsewhere).returncode == 0
    result = encore("-p", str(path), "send", "Charges", "--body", "{}", cwd=elsewhere)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "No module named 'operations.charges'" in result.stderr
    assert "'operations' is Encore's own package" in result.stderr
    assert "rename yours" in result.stderr


def test_a_user_package_that_hides_encores_from_the_current_directory_is_refused(
        tmp_path: Path) -> None:
    """Under ``python -m`` the current directory comes first on sys.path."""
    path = app(tmp_path, name="Web", cls="operations.http:HttpOperation")
    package(path.parent, "operations", {"http.py": ""})
    result = subprocess.run([sys.executable, "-m", "engine.cli", "status"], cwd=path.parent,
                            env=cli_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"the package 'operations' was imported from {path.parent.resolve()}" \
        in result.stderr
    assert "rename yours" in result.stderr
