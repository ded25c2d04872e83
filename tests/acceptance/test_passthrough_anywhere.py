"""The shipped passthrough example (docs/examples/soap-passthrough) run with ``-p`` from
another directory, with the backend it ships: its relative WSDL and database are found beside
the file, a daemon started while the backend is down says which item is not ready, and once
the backend is up a call goes through."""
from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import zeep

from tests.acceptance.daemon import RunningDaemon, encore
from tests.integration.inbound_support import EXAMPLE, free_port
from tests.waiting import wait_until

START = 60  # seconds a daemon may take to start on a loaded machine
READY = 90  # seconds for the item to find its backend (it tries every retry_interval)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the example's directory, its ports free ones; the production file's path."""
    home = tmp_path / "example"
    shutil.copytree(EXAMPLE, home)
    path = home / "production.toml"
    backend_port, inbound_port = free_port(), free_port()
    path.write_text(path.read_text().replace("127.0.0.1:8765", f"127.0.0.1:{backend_port}")
                    .replace("port = 8081", f"port = {inbound_port}"))
    return path


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    return directory


def _ports(path: Path) -> tuple[int, int]:
    text = path.read_text()
    backend = int(text.split('wsdl = "http://127.0.0.1:')[1].split("/")[0])
    inbound = int(text.split("\nport = ")[1].split()[0])
    return backend, inbound


@pytest.fixture
def backend_of(example: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.terminate()
        proc.wait(10)


def _backend_ready(database: Path) -> bool:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT count(*) FROM event_log WHERE config_name = 'EchoBackend' "
                            "AND text LIKE 'adapter ready%'").fetchone()[0] > 0


def _start_backend(example: Path, started: list[subprocess.Popen[bytes]]) -> None:
    port, _ = _ports(example)
    started.append(subprocess.Popen([sys.executable, str(example.parent / "backend.py"),
                                     str(port)], cwd=example.parent.parent,
                                    stdout=subprocess.DEVNULL))
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/?wsdl"), START, "the backend")


def test_the_example_runs_from_another_directory_and_says_what_is_not_ready(
        example: Path, elsewhere: Path, backend_of: list[subprocess.Popen[bytes]]) -> None:
    backend_port, inbound_port = _ports(example)
    encore("-p", str(example), "db", "upgrade", cwd=elsewhere)
    assert (example.parent / "passthrough.db").exists()
    assert not list(elsewhere.iterdir())
    wsdl = f"http://127.0.0.1:{inbound_port}/soap/echo?wsdl"
    with RunningDaemon(elsewhere, "-p", str(example)) as daemon:
        wait_until(lambda: "production SoapPassthrough started" in daemon.output, START,
                   "the start")
        started = next(line for line in daemon.output.splitlines()
                       if "production SoapPassthrough started" in line)
        assert "1 item(s) not ready, their messages stay queued: EchoBackend (" in started
        assert f"cannot load the WSDL http://127.0.0.1:{backend_port}/?wsdl" in started
        assert _answers(wsdl)  # its own WSDL, echo.wsdl beside the file, is served
        _start_backend(example, backend_of)
        wait_until(lambda: _backend_ready(example.parent / "passthrough.db"), READY,
                   "EchoBackend's next try to load its WSDL")
        assert zeep.Client(wsdl).service.echo(text="from elsewhere") == "from elsewhere"
        assert daemon.terminate() == 0
    checked = encore("-p", str(example), "check", cwd=elsewhere)
    assert "EchoBackend: ready" in checked.stdout and "EchoService: ready" in checked.stdout
