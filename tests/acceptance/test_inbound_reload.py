"""SIGHUP rebuilds the inbound services (docs/inbound.md): a changed route, a new service and
a new port take effect without a restart; a reload whose WSDL cannot be loaded is refused
whole, and the running services go on answering; a port that cannot be listened on stops
the inbound services with one Error event, and the daemon goes on."""
from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
import requests

from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.integration.inbound_support import WSDL, free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

START = 60  # seconds a daemon may take to start, or to reload, on a loaded machine
HEAD = ('[production]\nname = "InboundReload"\ndatabase = "sqlite:///e.db"\n'
        'poll_interval = 0.05\n[inbound]\nport = {port}\n')
TARGETS = ''.join(f'\n[[items]]\nname = "{name}"\n'
                  'class = "tests.unit.sample_ops:NamedEchoOperation"\n'
                  for name in ("First", "Second"))


def http_service(path: str, target: str) -> str:
    return ('\n[[items]]\nname = "Web"\nclass = "engine.inbound:HttpService"\n'
            f'[items.settings]\nroutes = [{{method = "POST", path = "{path}", '
            f'target = "{target}"}}]\nmode = "sync"\nresponse_timeout = 20\n')


def soap_service(wsdl: Path) -> str:
    return ('\n[[items]]\nname = "Soap"\nclass = "engine.inbound:SoapService"\n'
            f'[items.settings]\nwsdl = "{wsdl}"\npath = "/soap/echo"\ntarget = "First"\n')


def status(url: str, method: str = "POST") -> int | None:
    """The status ``url`` answers, None while nothing listens there."""
    try:
        return requests.request(method, url, json={"n": 1}, timeout=10).status_code
    except requests.ConnectionError:
        return None


def reload(daemon: RunningDaemon, path: Path, text: str) -> None:
    path.write_text(text)
    daemon.proc.send_signal(signal.SIGHUP)


def test_sighup_rebuilds_the_inbound_services_and_moves_their_port(tmp_path: Path) -> None:
    port, other = free_port(), free_port()
    path = tmp_path / "production.toml"
    path.write_text(HEAD.format(port=port) + TARGETS + http_service("/a", "First"))
    encore("db", "upgrade", cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    with RunningDaemon(tmp_path) as daemon:
        wait_until(lambda: status(f"{base}/a") == 200, START, "the inbound server")
        assert requests.post(f"{base}/a", json={"n": 1}, timeout=20).json()["by"] == "First"

        # a changed route and target, and a new SOAP service, on the same port
        reload(daemon, path, HEAD.format(port=port) + TARGETS + http_service("/b", "Second")
               + soap_service(WSDL))
        wait_until(lambda: status(f"{base}/b") == 200, START, "the new route")
        assert requests.post(f"{base}/b", json={"n": 2}, timeout=20).json()["by"] == "Second"
        assert status(f"{base}/a") == 404  # the old route is gone
        served = requests.get(f"{base}/soap/echo?wsdl", timeout=10)
        assert served.status_code == 200 and f'location="{base}/soap/echo"' in served.text

        # a WSDL that cannot be loaded: the reload is refused whole, the services go on
        broken = tmp_path / "broken.wsdl"
        broken.write_text("<definitions>not a WSDL")
        reload(daemon, path, HEAD.format(port=port) + TARGETS + http_service("/c", "First")
               + soap_service(broken))
        wait_until(lambda: "reload refused" in daemon.output, START, "the refusal")
        assert status(f"{base}/b") == 200 and status(f"{base}/c") == 404
        assert requests.get(f"{base}/soap/echo?wsdl", timeout=10).status_code == 200

        # [inbound] on another port: the old one closes, the new one serves
        other_base = f"http://127.0.0.1:{other}"
        reload(daemon, path, HEAD.format(port=other) + TARGETS + http_service("/b", "First"))
        wait_until(lambda: status(f"{other_base}/b") == 200, START, "the new port")
        assert requests.post(f"{other_base}/b", json={}, timeout=20).json()["by"] == "First"
        wait_until(lambda: status(f"{base}/b") is None, 20, "the old port to close")

        # a port another process holds: the services stop, with one Error event; the rest
        # of the reload holds, and the daemon goes on
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            reload(daemon, path, HEAD.format(port=taken.getsockname()[1]) + TARGETS
                   + http_service("/b", "First"))
            wait_until(lambda: errors(tmp_path, "the inbound services are stopped"), START,
                       "the failure to listen")
        assert status(f"{other_base}/b") is None
        assert daemon.proc.poll() is None
        assert daemon.terminate() == 0
    refusals = errors(tmp_path, "reload refused")
    assert len(refusals) == 1 and "broken.wsdl" in refusals[0], refusals
    stopped = errors(tmp_path, "the inbound services are stopped")
    assert len(stopped) == 1 and "could not listen" in stopped[0], stopped


def errors(tmp_path: Path, text: str) -> list[str]:
    """The Error events of the production that hold ``text``."""
    store = SqlStore(f"sqlite:///{tmp_path / 'e.db'}")
    try:
        return [e["text"] for e in queries.events(store, queries.EventFilter(type="Error"))
                if text in e["text"]]
    finally:
        store.dispose()
