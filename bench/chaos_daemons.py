"""The fault campaign's daemons: ``encore run`` subprocesses, each in a directory of its
own with its own production file (the same items and database, its own ``[portal]`` and
``[inbound]`` ports, database URL — through its own proxies — and ``Stall-<name>`` item),
and its log. Where libfaketime is installed, each runs under it with a clock file of its
own (bench/chaos_clock.py), so that a fault can step its wall clock.

Settings are scaled down so that a fault outlives the lease in seconds, not minutes: a
lease of 2 s, retries 0.2 s apart, a response timeout of 2 s. A failure timeout of 15 s
outlasts any fault and the lease after it, so that a fault alone never makes a message
give up (one the server answered 2xx must end Completed: the reconciliation invariant);
25 attempts at most end the always-refused tags after about 5 s, as before.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.chaos_checker import ClaimLoss, claim_losses
from bench.chaos_clock import faketime_env, faketime_library
from bench.chaos_xml import SOAP_PATH, WSDL

__all__ = ["FAULT_ITEMS", "ITEMS", "LEASE_SECONDS", "Daemon", "free_port", "production_toml",
           "stall_item"]

ROOT = Path(__file__).resolve().parents[1]
LEASE_SECONDS = 2.0
# item → its role for the checker (bench/chaos_checker.py ROLES): the producer's items
ITEMS = {"Idem": "idempotent", "Once": "once", "Fifo": "fifo"}
# the items only faults send to (bench/chaos_xml.py), with their roles
FAULT_ITEMS = {"Soap": "once"}
START_TIMEOUT = 60.0  # seconds a daemon may take to say it started (a loaded machine)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _item(name: str, url: str, *, idempotent: bool, pool_size: int) -> str:
    return (f'\n[[items]]\nname = "{name}"\nclass = "operations.http:HttpOperation"\n'
            f"pool_size = {pool_size}\n[items.settings]\nurl = {json.dumps(url)}\n"
            f"idempotent = {json.dumps(idempotent)}\nretry_interval = 0.2\n"
            "failure_timeout = 15\nmax_attempts = 25\nresponse_timeout = 2\nconnect_timeout = 1\n")


def _xml_items(server_url: str) -> str:
    """The inbound SoapService (``EchoSoap`` → ``Sink``) and the outbound ``Soap`` item of
    bench/chaos_xml.py, whose calls go to ``server_url/soap``."""
    return ('\n[[items]]\nname = "Sink"\nclass = "bench.ops:NoopOperation"\n'
            '\n[[items]]\nname = "EchoSoap"\nclass = "engine.inbound:SoapService"\n'
            f"[items.settings]\nwsdl = {json.dumps(str(WSDL))}\npath = {json.dumps(SOAP_PATH)}\n"
            'target = "Sink"\n'
            '\n[[items]]\nname = "Soap"\nclass = "operations.soap:SoapOperation"\n'
            f"[items.settings]\nwsdl = {json.dumps(str(WSDL))}\n"
            f"servers = [{json.dumps(server_url + '/soap')}]\nidempotent = false\n"
            "retry_interval = 0.2\nfailure_timeout = 15\nmax_attempts = 25\nresponse_timeout = 2\n"
            "connect_timeout = 1\n")


def production_toml(database: str, server_url: str, portal_port: int, *, name: str = "d",
                    inbound_port: int | None = None) -> str:
    """The production file of daemon ``name`` of the campaign (its requests go to
    ``server_url``; its inbound SoapService listens on ``inbound_port``, if given)."""
    inbound = f"\n[inbound]\nport = {inbound_port}\n" if inbound_port else ""
    return (f'[production]\nname = "Chaos"\ndatabase = {json.dumps(database)}\n'
            f"lease_seconds = {LEASE_SECONDS}\npoll_interval = 0.5\nshutdown_timeout = 2\n"
            f'\n[portal]\nhost = "127.0.0.1"\nport = {portal_port}\n{inbound}'
            + _item("Idem", server_url, idempotent=True, pool_size=3)
            + _item("Once", server_url, idempotent=False, pool_size=3)
            + _item("Fifo", server_url, idempotent=True, pool_size=1)
            + (_xml_items(server_url) if inbound_port else "")
            + f'\n[[items]]\nname = "{stall_item(name)}"\n'
            'class = "bench.chaos_stall:StallOperation"\n')


def stall_item(name: str) -> str:
    """The item only daemon ``name`` runs: its messages stall it (bench/chaos_stall.py)."""
    return f"Stall-{name}"


class Daemon:
    """One ``encore run`` of the campaign, started, killed and restarted at will."""

    def __init__(self, name: str, directory: Path, database: str, server_url: str) -> None:
        self.name = name
        self.directory = directory
        self.database = database
        self.portal_port = free_port()
        self.inbound_port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.production = directory / "production.toml"
        # the server tells the daemons apart by the first segment of the path
        self.production.write_text(production_toml(
            database, server_url + name, self.portal_port, name=name,
            inbound_port=self.inbound_port))
        self.clock_file = directory / "faketime-offset"  # "+0", or a step (chaos_clock)
        library = faketime_library()
        self.faketime = (faketime_env(library, self.clock_file, directory / "site")
                         if library else {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stopped = False  # SIGSTOPped

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log(self) -> Path:
        return self.directory / f"daemon-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        path = [str(ROOT)]
        if self.faketime:
            path.insert(0, str(self.directory / "site"))  # its sitecustomize (chaos_clock)
        env = {**os.environ, **self.faketime, "PYTHONPATH": os.pathsep.join(path)}
        env.pop("ENCORE_DATABASE_URL", None)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "engine.cli", "-p", str(self.production), "run"],
                cwd=self.directory, env=env, stdout=out, stderr=subprocess.STDOUT)

    def wait_started(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "production Chaos started" in self.output():
                return
            if not self.alive():
                raise RuntimeError(f"daemon {self.name} exited at start:\n{self.output()}")
            time.sleep(0.05)
        raise RuntimeError(f"daemon {self.name} did not start in {timeout:g} s:\n"
                           f"{self.output()[-3000:]}")

    def claim_losses(self) -> list[ClaimLoss]:
        """The claims and leases it says, in the logs of all its runs, it lost."""
        out = []
        for start in range(1, self.starts + 1):
            try:
                text = (self.directory / f"daemon-{start}.log").read_text(errors="replace")
            except OSError:
                continue
            out += claim_losses(self.name, text)
        return out

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            if self.stopped:
                self.cont()
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        """SIGSTOP: frozen, as a paused VM or a long GC."""
        if self.alive():
            os.kill(self.pid, signal.SIGSTOP)
            self.stopped = True

    def cont(self) -> None:
        if self.alive() and self.stopped:
            os.kill(self.pid, signal.SIGCONT)
        self.stopped = False

    def terminate(self, timeout: float = 30) -> int | None:
        if self.proc is None:
            return None
        if self.alive():
            self.cont()
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(10)
        return self.proc.returncode
