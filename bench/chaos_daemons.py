"""The fault campaign's daemons: ``encore run`` subprocesses, each in a directory of its
own with its own production file (the same items and database, its own ``[portal]`` port
and database URL — through its own proxies), and its log.

Settings are scaled down so that a fault outlives the lease in seconds, not minutes: a
lease of 2 s, retries 0.2 s apart, a response timeout of 2 s, a failure timeout of 5 s.
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

__all__ = ["ITEMS", "LEASE_SECONDS", "Daemon", "free_port", "production_toml"]

ROOT = Path(__file__).resolve().parents[1]
LEASE_SECONDS = 2.0
# item → its role for the checker (bench/chaos_checker.py ROLES)
ITEMS = {"Idem": "idempotent", "Once": "once", "Fifo": "fifo"}
START_TIMEOUT = 60.0  # seconds a daemon may take to say it started (a loaded machine)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _item(name: str, url: str, *, idempotent: bool, pool_size: int) -> str:
    return (f'\n[[items]]\nname = "{name}"\nclass = "operations.http:HttpOperation"\n'
            f"pool_size = {pool_size}\n[items.settings]\nurl = {json.dumps(url)}\n"
            f"idempotent = {json.dumps(idempotent)}\nretry_interval = 0.2\n"
            "failure_timeout = 5\nresponse_timeout = 2\nconnect_timeout = 1\n")


def production_toml(database: str, server_url: str, portal_port: int) -> str:
    """The production file of one daemon of the campaign."""
    return (f'[production]\nname = "Chaos"\ndatabase = {json.dumps(database)}\n'
            f"lease_seconds = {LEASE_SECONDS}\npoll_interval = 0.5\nshutdown_timeout = 2\n"
            f'\n[portal]\nhost = "127.0.0.1"\nport = {portal_port}\n'
            + _item("Idem", server_url, idempotent=True, pool_size=3)
            + _item("Once", server_url, idempotent=False, pool_size=3)
            + _item("Fifo", server_url, idempotent=True, pool_size=1))


class Daemon:
    """One ``encore run`` of the campaign, started, killed and restarted at will."""

    def __init__(self, name: str, directory: Path, database: str, server_url: str) -> None:
        self.name = name
        self.directory = directory
        self.database = database
        self.portal_port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.production = directory / "production.toml"
        # the server tells the daemons apart by the first segment of the path
        self.production.write_text(production_toml(database, server_url + name,
                                                   self.portal_port))
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
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
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
