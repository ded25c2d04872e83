"""``encore check`` loads a production as ``encore run`` would and says, one line per item,
what would fail — exit status 1 then — against real SOAP services and real databases (SQLite
and PostgreSQL); ``encore status`` warns about what ``run`` would refuse."""
from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from engine.store import migrate
from engine.tools.demo import PRODUCTION
from tests.acceptance.daemon import encore
from tests.integration.inbound_support import EXAMPLE, free_port
from tests.servers import SoapTestServer

pytestmark = pytest.mark.cli_in_process  # what the commands print and store

# The demo's production, its response timeout (which also bounds the WSDL's load) 10 s: the
# demo's 0.7 s is the seed's timeline, too tight for a WSDL fetched on a loaded machine.
DEMO = PRODUCTION.replace("response_timeout = 0.7", "response_timeout = 10")


@pytest.fixture(scope="module")
def backend() -> Iterator[SoapTestServer]:
    with SoapTestServer("B") as server:
        yield server


def _demo(directory: Path, wsdl: str, *, url: str | None = None, extra: str = "") -> Path:
    """The demo's production beside an upgraded database (``url``: another than the
    SQLite file beside it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "production.toml"
    path.write_text(DEMO.format(item="DemoSoapService", wsdl=wsdl) + extra)
    encore("-p", str(path), "db", "upgrade", cwd=directory, env=_env(url))
    return path


def _env(url: str | None) -> dict[str, str]:
    return {"ENCORE_DATABASE_URL": url} if url else {}


def _passthrough(directory: Path, backend: SoapTestServer, *, rename: str = "") -> Path:
    """The shipped passthrough example, its backend the test's; ``rename``: an operation of
    its inbound WSDL renamed (to one the backend does not have)."""
    directory.mkdir(parents=True, exist_ok=True)
    wsdl = (EXAMPLE / "echo.wsdl").read_text()
    (directory / "echo.wsdl").write_text(wsdl.replace("fail", rename) if rename else wsdl)
    text = (EXAMPLE / "production.toml").read_text()
    text = text.replace("http://127.0.0.1:8765/?wsdl", backend.wsdl).replace(
        "port = 8081", f"port = {free_port()}")
    path = directory / "production.toml"
    path.write_text(text)
    encore("-p", str(path), "db", "upgrade", cwd=directory)
    return path


def test_check_passes_on_the_demo_production_run_from_another_directory(
        tmp_path: Path, database_url: str, backend: SoapTestServer) -> None:
    url = None if database_url.startswith("sqlite") else database_url
    path = _demo(tmp_path / "prod", backend.wsdl, url=url)
    result = encore("-p", str(path), "check", cwd=tmp_path, check=False, env=_env(url))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert f"DemoSoapService: ready (WSDL {backend.wsdl}: echo, fail, refuse)" in lines
    assert any(line.startswith("database: ") and "at the latest schema" in line
               for line in lines)
    assert lines[-1] == "all 1 item ready"


def test_check_passes_on_the_shipped_passthrough_run_from_another_directory(
        tmp_path: Path, backend: SoapTestServer) -> None:
    path = _passthrough(tmp_path / "prod", backend)
    result = encore("-p", str(path), "check", cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    wsdl = tmp_path / "prod" / "echo.wsdl"
    assert f"EchoService: ready (WSDL {wsdl}: echo, fail, refuse)" in result.stdout


@pytest.mark.parametrize(("edit", "says"), [
    # an Ensemble setting Encore does not have
    (("response_timeout = 10", "response_timeout = 10\nHTTPServer = \"x\""),
     "DemoSoapService: not ready: setting 'HTTPServer': unknown setting"),
    # a typo in Encore's own class
    (("operations.soap:SoapOperation", "operations.soap:SoapOperaton"),
     "did you mean 'operations.soap:SoapOperation'?"),
    # a WSDL file that is not there, named relative to the production file
    (('wsdl = "', 'wsdl = "missing.wsdl" # '), "PROD/missing.wsdl"),
    # 0 seconds for an attempt, in Ensemble's spelling
    (("response_timeout = 10", "ResponseTimeout = 0"),
     "setting 'ResponseTimeout': 0 leaves an attempt no time at all"),
])
def test_check_fails_on_a_bad_item_saying_why(tmp_path: Path, backend: SoapTestServer,
                                              edit: tuple[str, str], says: str) -> None:
    path = _demo(tmp_path, backend.wsdl)
    path.write_text(path.read_text().replace(*edit))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = encore("-p", str(path), "check", cwd=elsewhere, check=False)
    assert result.returncode == 1, result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("DemoSoapService"))
    assert line.startswith("DemoSoapService: not ready: ")
    assert says.replace("PROD", str(tmp_path)) in line
    assert "1 problem" in result.stderr


def test_check_fails_on_a_wsdl_without_an_operation_the_inbound_service_forwards(
        tmp_path: Path, backend: SoapTestServer) -> None:
    path = _passthrough(tmp_path, backend, rename="purge")
    result = encore("-p", str(path), "check", cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert ("EchoService: not ready: its WSDL's operation 'purge' is in the WSDL of none of "
            "the SOAP items its calls reach (EchoBackend, which offer echo, fail, refuse)"
            ) in result.stdout.splitlines()


def test_check_fails_on_a_router_rule_naming_no_item(tmp_path: Path,
                                                     backend: SoapTestServer) -> None:
    path = _passthrough(tmp_path, backend)
    path.write_text(path.read_text().replace('default_target = "EchoBackend"',
                                             'default_target = "EchoBackend"\nrules = [{'
                                             'field = "operation", equals = "fail", '
                                             'target = "EchoBakend"}]'))
    result = encore("-p", str(path), "check", cwd=tmp_path, check=False)
    assert result.returncode == 1
    line = next(x for x in result.stdout.splitlines() if x.startswith("EchoRouter"))
    assert "target 'EchoBakend' is not an item" in line and "did you mean 'EchoBackend'" in line


def test_check_fails_on_a_port_in_use(tmp_path: Path, backend: SoapTestServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = _demo(tmp_path, backend.wsdl, extra=f"\n[portal]\nport = {port}\n")
        result = encore("-p", str(path), "check", cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert f"[portal] port: cannot listen on 127.0.0.1:{port}: Address already in use" \
        in result.stdout.splitlines()


def test_check_fails_on_a_database_schema_behind(tmp_path: Path, database_url: str,
                                                 backend: SoapTestServer) -> None:
    engine = create_engine(database_url)
    migrate.upgrade(engine, "0006")
    engine.dispose()
    url = None if database_url.startswith("sqlite") else database_url
    path = tmp_path / "production.toml"
    path.write_text(DEMO.format(item="DemoSoapService", wsdl=backend.wsdl))
    result = encore("-p", str(path), "check", cwd=tmp_path, check=False, env=_env(url))
    assert result.returncode == 1
    line = next(x for x in result.stdout.splitlines() if x.startswith("database:"))
    assert "at revision 0006" in line and "run `encore db upgrade`" in line
    assert "DemoSoapService: ready" in result.stdout  # the items are checked all the same


def test_status_warns_about_a_setting_run_would_refuse(tmp_path: Path,
                                                       backend: SoapTestServer) -> None:
    path = _demo(tmp_path, backend.wsdl)
    path.write_text(path.read_text().replace("response_timeout = 10",
                                             'response_timeout = 10\nSSLConfig = "x"'))
    result = encore("-p", str(path), "status", cwd=tmp_path)
    assert ("warning: item 'DemoSoapService', setting 'SSLConfig': unknown setting"
            in result.stderr)
    assert "DemoSoapService" in result.stdout  # the status itself as before


def test_send_refuses_an_operation_the_wsdl_does_not_have_and_creates_nothing(
        tmp_path: Path, backend: SoapTestServer) -> None:
    path = _demo(tmp_path, backend.wsdl)
    sent = encore("-p", str(path), "send", "DemoSoapService", "--body",
                  '{"operation": "NoSuchOp"}', cwd=tmp_path, check=False)
    assert sent.returncode == 1
    assert ("unknown operation 'NoSuchOp'; the WSDL offers: echo, fail, refuse; nothing was "
            "enqueued") in sent.stderr
    assert encore("-p", str(path), "messages", "--json", cwd=tmp_path).stdout == ""
