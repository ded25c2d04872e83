"""The portal can never starve delivery (docs/security.md, issue 22 finding 1): a real ``encore
run`` with ``[portal]`` on SQLite, under an open-file limit of :data:`NOFILE`, is flooded
with many more half-open connections than that limit (slowloris: a partial request line,
then silence) from several loopback addresses, while it delivers messages to a real
loopback HTTP service. Every message completes, none gives up, nothing says "Too many open
files", the log stays short, the daemon never holds more descriptors than its caps allow,
and every stalled connection is closed by the server after the read timeout. One address
alone holds at most ``max_connections_per_client`` connections and the portal still answers
others meanwhile; a standalone ``encore portal`` closes stalled connections the same way.

Linux sends loopback traffic from any 127.0.0.0/8 address, so each "client" binds its own.
Timings are real and loose: the bounds hold at load 6 on 2 cores.
"""
from __future__ import annotations

import os
import resource
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from engine.client import accept_message
from engine.config.production import PortalConfig, load_production, parse_production
from engine.errors import ConfigurationError
from engine.portal.server import PortalServer
from engine.serving.limits import ConnectionGate, DescriptorBudget, ServerLimits
from engine.store.sql import SqlStore
from tests.acceptance.daemon import cli_env
from tests.integration.test_portal_server import free_port
from tests.portal_support import add_token, bearer
from tests.portal_support import production as portal_production
from tests.servers import HttpTestServer, make_tls, respond
from tests.waiting import wait_until

NOFILE = 256  # the daemon's open-file limit here: reserve 128, so 128 connections at most
READ_TIMEOUT = 1.0  # seconds, [portal] read_timeout of these tests
PER_CLIENT = 16  # [portal] max_connections_per_client of these tests
FLOOD_ADDRESSES = 8  # loopback addresses the flood comes from: 8 × 16 = 128 fills the total
FLOOD_PER_ADDRESS = 128  # connections each address keeps open: 8 × 128 = 4 × NOFILE at once
FLOOD_SECONDS = 8.0  # how long the flood goes on (several read timeouts)
MESSAGES = 60
CLOSED_WITHIN = READ_TIMEOUT + 6.0  # seconds a stalled connection may live, on a busy box
MAX_LOG_LINES = 60  # the daemon's log during the flood (it was 309,314 tracebacks)
SLOW = b"GET /login HTTP/1.1\r\nHost: x\r\n"  # never the blank line that ends the headers

PRODUCTION = """
[production]
name = "Limits"
database = "{url}"
poll_interval = 0.05

[[items]]
name = "Http"
class = "operations.http:HttpOperation"
pool_size = 4
[items.settings]
url = "{http}"

[portal]
port = {port}
read_timeout = {read_timeout}
max_connections_per_client = {per_client}
"""


def _limit_files() -> None:  # preexec_fn of the child: its own, low open-file limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


@dataclass
class Child:
    """``encore …`` as a subprocess under :data:`NOFILE` open files, its log in a file."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    base: str
    peak_files: int = 0

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def watch_files(self, stop: threading.Event) -> None:
        while not stop.wait(0.05):
            try:
                self.peak_files = max(self.peak_files, self.open_files())
            except FileNotFoundError:
                return

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _start(tmp_path: Path, *command: str) -> Child:
    log_path = tmp_path / f"{command[0]}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "engine.cli", *command], cwd=tmp_path,
                                env=cli_env(), stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=_limit_files)
    text = (tmp_path / "production.toml").read_text()
    port = int(text.split("port = ")[1].split()[0])
    child = Child(proc, log_path, f"http://127.0.0.1:{port}")
    wait_until(lambda: _answers(child.base) or proc.poll() is not None, 60, "the portal")
    assert proc.poll() is None, child.log
    return child


def _answers(base: str, source: str = "127.0.0.1") -> bool:
    try:
        return _get(base, "/login", source) == 200
    except OSError:
        return False


def _get(base: str, path: str, source: str, timeout: float = 10.0) -> int:
    """Status of a GET from loopback address ``source``, on a connection of its own."""
    host, port = base.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=timeout,
                                  source_address=(source, 0)) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        head = sock.recv(64)
    return int(head.split()[1])


def _stop(child: Child) -> None:
    if child.proc.poll() is None:
        child.proc.terminate()
        try:
            child.proc.wait(30)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait(10)


@dataclass
class Flood:
    """Half-open connections from ``addresses``, each keeping up to ``per_address`` tries
    alive: a connection the server closes is replaced by a new one until :meth:`stop`."""

    port: int
    addresses: list[str]
    per_address: int
    opened: int = 0  # connections the flood opened
    refused: int = 0  # ... that the server closed or reset before the read timeout
    timed_out: int = 0  # ... that it closed after the read timeout (they stalled to the end)
    peak_held: int = 0  # most connections the server held open at once
    peak_open: int = 0  # most connections the flood had open at once (held or not yet reset)
    lifetimes: list[float] = field(default_factory=list)  # seconds each held one lived
    _stopping: threading.Event = field(default_factory=threading.Event)
    _held: dict[str, int] = field(default_factory=dict)
    _open_now: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _left: list[tuple[socket.socket, float]] = field(default_factory=list)

    def start(self) -> Flood:
        for address in self.addresses:
            thread = threading.Thread(target=self._flood, args=(address,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> list[tuple[socket.socket, float]]:
        """Stop opening; the connections still open, with the time each was opened."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(30)
        return self._left

    def _flood(self, address: str) -> None:
        alive: list[tuple[socket.socket, float]] = []
        while not self._stopping.is_set():
            while len(alive) < self.per_address and not self._stopping.is_set():
                sock = self._open(address)
                if sock is not None:
                    alive.append((sock, time.monotonic()))
            with self._lock:
                self._open_now[address] = len(alive)
                self.peak_open = max(self.peak_open, sum(self._open_now.values()))
            time.sleep(0.2)
            alive = [entry for entry in alive if not self._ended(*entry)]
            with self._lock:
                self._held[address] = len(alive)
                self.peak_held = max(self.peak_held, sum(self._held.values()))
        with self._lock:
            self._left.extend(alive)

    def _open(self, address: str) -> socket.socket | None:
        sock = socket.socket()
        sock.settimeout(2.0)
        try:
            sock.bind((address, 0))
            sock.connect(("127.0.0.1", self.port))
            sock.sendall(SLOW)
        except OSError:
            sock.close()
            with self._lock:
                self.refused += 1
            return None
        sock.setblocking(False)
        with self._lock:
            self.opened += 1
        return sock

    def _ended(self, sock: socket.socket, opened: float) -> bool:
        """Whether the server closed ``sock`` (counted as refused or timed out)."""
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        lived = time.monotonic() - opened
        sock.close()
        with self._lock:
            if lived < READ_TIMEOUT * 0.8 and not data.startswith(b"HTTP/1.1 408"):
                self.refused += 1
            else:
                self.timed_out += 1
                self.lifetimes.append(lived)
        return True


def _slow_connection(port: int, source: str) -> socket.socket:
    """A connection from ``source`` that sends :data:`SLOW` (unless it is refused at once,
    which may already show in the connect or the send)."""
    sock = socket.socket()
    sock.settimeout(5)
    sock.bind((source, 0))
    try:
        sock.connect(("127.0.0.1", port))
        sock.sendall(SLOW)
    except ConnectionError:
        pass  # reset: refused
    return sock


def _held(sock: socket.socket) -> bool:
    """Whether the server holds ``sock`` open, still waiting for the rest of its request
    (anything it sent — a reset, the end, a 408 — means it let go)."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        pass
    return False


def _closed_by_server(left: list[tuple[socket.socket, float]], within: float) -> list[float]:
    """Wait until every socket of ``left`` is closed by the server; their lifetimes."""
    lifetimes: list[float] = []
    deadline = time.monotonic() + within
    for sock, opened in left:
        sock.setblocking(True)
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            sock.recv(4096)  # the 408, or the end of the connection
        except TimeoutError:
            raise AssertionError("a stalled connection was not closed by the server") from None
        except OSError:
            pass
        lifetimes.append(time.monotonic() - opened)
        sock.close()
    return lifetimes


@pytest.fixture
def service() -> Iterator[HttpTestServer]:
    with HttpTestServer({"POST /orders": respond(201, '{"ok": true}')}) as http:
        yield http


@pytest.fixture
def production(tmp_path: Path, service: HttpTestServer) -> Path:
    url = f"sqlite:///{tmp_path / 'limits.db'}"
    path = tmp_path / "production.toml"
    path.write_text(PRODUCTION.format(url=url, http=service.url, port=free_port(),
                                      read_timeout=READ_TIMEOUT, per_client=PER_CLIENT))
    subprocess.run([sys.executable, "-m", "engine.cli", "db", "upgrade"], cwd=tmp_path,
                   env=cli_env(), check=True, capture_output=True, timeout=120)
    return path


def test_a_slowloris_flood_beyond_the_file_limit_delays_no_delivery(
        tmp_path: Path, production: Path, service: HttpTestServer) -> None:
    daemon = _start(tmp_path, "run")
    watching = threading.Event()
    threading.Thread(target=daemon.watch_files, args=(watching,), daemon=True).start()
    config = load_production(production, env={})
    store = SqlStore(config.database)
    addresses = [f"127.0.0.{n}" for n in range(2, 2 + FLOOD_ADDRESSES)]
    port = int(daemon.base.rsplit(":", 1)[1])
    try:
        baseline = daemon.open_files()
        flood = Flood(port, addresses, FLOOD_PER_ADDRESS).start()
        time.sleep(1.0)  # the flood is at its peak
        sent = time.monotonic()
        ids = [accept_message(store, config, "Http", {"method": "POST", "path": "/orders",
                                                      "json": {"n": n}}).id
               for n in range(MESSAGES)]
        wait_until(lambda: all(store.get_message(i).status == "Completed" for i in ids),
                   60, "every message delivered during the flood")
        delivered = time.monotonic()
        print(f"\n{MESSAGES} messages accepted and delivered in {delivered - sent:.2f} s "
              "during the flood", end="")
        time.sleep(max(0.0, FLOOD_SECONDS - 1.0 - (time.monotonic() - delivered)))
        left = flood.stop()
        lifetimes = _closed_by_server(left, CLOSED_WITHIN)
        watching.set()
        statuses = {store.get_message(i).status for i in ids}
        assert _answers(daemon.base), "the portal answers again after the flood"
    finally:
        watching.set()
        store.dispose()
        _stop(daemon)
    log = daemon.log  # with the counts logged at exit
    lines = log.splitlines()
    _report("encore run", flood, daemon, baseline, lifetimes, len(lines))
    assert statuses == {"Completed"}
    assert len(service.requests) == MESSAGES  # each delivered once, none given up
    assert flood.opened + flood.refused > 3 * NOFILE  # far more than the limit were tried
    assert flood.peak_open > 2 * NOFILE  # ... and open at once
    assert flood.refused > NOFILE  # most were refused at once ...
    assert flood.timed_out >= 100  # ... and the held ones closed at the read timeout
    assert daemon.peak_files < NOFILE - 64  # the reserve was never touched
    assert "Too many open files" not in log and "Traceback" not in log, log[-3000:]
    assert len(lines) < MAX_LOG_LINES, log[-3000:]
    assert max(flood.lifetimes + lifetimes) < CLOSED_WITHIN
    refusals = [line for line in lines if "refused a connection" in line]
    # the first at once, then at exit "N more like this held back since …: refused …"
    counted = int(refusals[-1].split(" more like this held back", 1)[0].rsplit(" ", 1)[1])
    assert len(refusals) == 2 and counted > NOFILE


def _report(what: str, flood: Flood, child: Child, baseline: int, lifetimes: list[float],
            lines: int) -> None:
    held = sorted(flood.lifetimes + lifetimes)
    print(f"\n{what}: RLIMIT_NOFILE {NOFILE}; flood from {len(flood.addresses)} addresses "
          f"opened {flood.opened} connections ({flood.refused} refused at once, "
          f"{flood.timed_out + len(lifetimes)} closed at the read timeout), up to "
          f"{flood.peak_open} open at once, the server held at most {flood.peak_held}; "
          f"files open: {baseline} before, {child.peak_files} at "
          f"most; held connections lived {held[0]:.2f}–{held[-1]:.2f} s "
          f"(read_timeout {READ_TIMEOUT} s); {lines} log lines; "
          f"load {os.getloadavg()[0]:.1f}")


def test_one_address_holds_at_most_its_share_and_others_are_still_answered(
        tmp_path: Path, production: Path) -> None:
    daemon = _start(tmp_path, "run")
    config = load_production(production, env={})
    store = SqlStore(config.database)
    token = add_token(store, "sender")
    port = int(daemon.base.rsplit(":", 1)[1])
    try:
        socks = [_slow_connection(port, "127.0.0.2") for _ in range(4 * PER_CLIENT)]
        time.sleep(0.3)
        held = sum(_held(sock) for sock in socks)
        answer = requests.post(f"{daemon.base}/api/v1/messages/Http", headers=bearer(token),
                               json={"method": "POST", "path": "/orders", "json": {}},
                               timeout=10)  # from 127.0.0.1, while 127.0.0.2 is at its cap
        other = _get(daemon.base, "/login", "127.0.0.3")
        time.sleep(READ_TIMEOUT + 2.0)
        still = sum(_held(sock) for sock in socks)
        for sock in socks:
            sock.close()
    finally:
        store.dispose()
        _stop(daemon)
    print(f"\none address: {len(socks)} connections, {held} held, {still} left after the "
          f"read timeout; load {os.getloadavg()[0]:.1f}")
    assert held == PER_CLIENT
    assert answer.status_code == 202, answer.text
    assert other == 200
    assert still == 0


def test_a_standalone_portal_closes_stalled_connections_after_the_read_timeout(
        tmp_path: Path, production: Path) -> None:
    portal = _start(tmp_path, "portal")
    watching = threading.Event()
    threading.Thread(target=portal.watch_files, args=(watching,), daemon=True).start()
    port = int(portal.base.rsplit(":", 1)[1])
    baseline = portal.open_files()
    try:
        flood = Flood(port, ["127.0.0.2", "127.0.0.3", "127.0.0.4"], 8 * PER_CLIENT).start()
        time.sleep(2 * READ_TIMEOUT + 1.0)
        during = _get(portal.base, "/login", "127.0.0.9")
        left = flood.stop()
        lifetimes = _closed_by_server(left, CLOSED_WITHIN)
        watching.set()
        log = portal.log
        assert _answers(portal.base)
    finally:
        watching.set()
        _stop(portal)
    _report("encore portal", flood, portal, baseline, lifetimes, len(log.splitlines()))
    assert during == 200
    assert flood.opened + flood.refused > NOFILE
    assert all(READ_TIMEOUT * 0.8 <= lived < CLOSED_WITHIN
               for lived in flood.lifetimes + lifetimes)
    assert "Too many open files" not in log and "Traceback" not in log, log[-3000:]
    assert len(log.splitlines()) < MAX_LOG_LINES
    assert portal.peak_files < NOFILE - 64


# -- in-process: TLS, proxies, keep-alive, sizing ------------------------------------------

@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqlStore]:
    store = SqlStore(f"sqlite:///{tmp_path / 'portal.db'}")
    store.upgrade()
    yield store
    store.dispose()


def _served(store: SqlStore, **table: object) -> PortalServer:
    server = PortalServer(store, portal_production(store.url),
                          PortalConfig.from_validated({"port": free_port(), **table}), env={})
    server.start()
    return server


def _lives(sock: socket.socket, within: float) -> float:
    """Seconds until the server ends ``sock`` (it sent an answer or closed)."""
    started = time.monotonic()
    sock.settimeout(within)
    try:
        sock.recv(4096)
    except TimeoutError:
        raise AssertionError(f"the server still held the connection after {within} s") from None
    except OSError:
        pass
    return time.monotonic() - started


def test_a_tls_portal_closes_a_connection_that_never_finishes_its_handshake_or_request(
        sqlite_store: SqlStore, tmp_path: Path) -> None:
    tls = make_tls(tmp_path)
    server = _served(sqlite_store, tls_cert=str(tls.server_cert), tls_key=str(tls.server_cert),
                     read_timeout=READ_TIMEOUT)
    port = server.config.port
    try:
        silent = socket.create_connection(("127.0.0.1", port))  # never says hello
        context = ssl.create_default_context(cafile=str(tls.ca))
        slow = context.wrap_socket(socket.create_connection(("127.0.0.1", port)),
                                   server_hostname="127.0.0.1")
        slow.sendall(SLOW)
        assert _lives(silent, CLOSED_WITHIN) >= READ_TIMEOUT * 0.8
        assert _lives(slow, CLOSED_WITHIN) < CLOSED_WITHIN
        answer = requests.get(f"{server.url}/login", verify=str(tls.ca), timeout=10)
        silent.close()
        slow.close()
    finally:
        server.stop()
    assert answer.status_code == 200


def test_a_stop_never_waits_on_an_idle_tls_client(sqlite_store: SqlStore,
                                                 tmp_path: Path) -> None:
    """A TLS connection closed by the server waits for its peer's close_notify; an idle
    keep-alive client never sends one, and the server's thread outlived its stop (then
    its event loop would not close: a connection still open)."""
    tls = make_tls(tmp_path)
    server = _served(sqlite_store, tls_cert=str(tls.server_cert), tls_key=str(tls.server_cert))
    client = requests.Session()
    try:
        assert client.get(f"{server.url}/login", verify=str(tls.ca), timeout=10).ok
        started = time.monotonic()
        server.stop()  # the client keeps its connection, idle
        took = time.monotonic() - started
    finally:
        client.close()
    assert not server._thread.is_alive(), f"the portal still ran {took:.1f} s after its stop"


def test_the_proxies_of_forwarded_allow_ips_are_spared_the_per_client_cap(
        sqlite_store: SqlStore) -> None:
    server = _served(sqlite_store, max_connections_per_client=4, read_timeout=5.0,
                     forwarded_allow_ips=("127.0.0.2",))
    port = server.config.port
    try:
        socks = {source: [_slow_connection(port, source) for _ in range(10)]
                 for source in ("127.0.0.2", "127.0.0.3")}
        time.sleep(0.3)
        held = {source: sum(_held(s) for s in group) for source, group in socks.items()}
        for group in socks.values():
            for sock in group:
                sock.close()
    finally:
        server.stop()
    assert held == {"127.0.0.2": 10, "127.0.0.3": 4}


def test_an_idle_keep_alive_connection_closes_after_keepalive_timeout(
        sqlite_store: SqlStore) -> None:
    server = _served(sqlite_store, keepalive_timeout=0.5, read_timeout=30.0)
    try:
        sock = socket.create_connection(("127.0.0.1", server.config.port), timeout=10)
        sock.sendall(b"GET /login HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(12) == b"HTTP/1.1 200"
        time.sleep(0.1)
        sock.recv(1 << 16)  # the rest of the page
        lived = _lives(sock, 10.0)
        sock.close()
    finally:
        server.stop()
    assert lived < 10.0  # far below the read timeout: the keep-alive timer closed it


@pytest.mark.parametrize("limit, total, per_client", [
    (256, 128, 32),      # reserve 128: the floor
    (1024, 768, 64),     # reserve a quarter; per client at most 64
    (20000, 4096, 64),   # sized total at most 4096
])
def test_the_caps_are_sized_from_the_open_file_limit(limit: int, total: int,
                                                     per_client: int) -> None:
    limits = ServerLimits.sized(budget=DescriptorBudget(limit))
    assert (limits.max_connections, limits.max_connections_per_client) == (total, per_client)


def test_caps_the_open_file_limit_cannot_hold_are_refused_naming_the_key() -> None:
    with pytest.raises(ConfigurationError, match="at most 768") as info:
        ServerLimits.sized(max_connections=1000, budget=DescriptorBudget(1024))
    assert info.value.key == "max_connections" and "ulimit -n" in str(info.value)
    with pytest.raises(ConfigurationError, match="raise it to at least 144"):
        ServerLimits.sized(budget=DescriptorBudget(100))


def test_every_limited_server_of_a_process_draws_on_one_budget() -> None:
    budget = DescriptorBudget(256)  # 128 connections for all servers together
    gates = [ConnectionGate(ServerLimits.sized(max_connections_per_client=128, budget=budget),
                            budget) for _ in range(2)]
    admitted = [gate.admit(f"10.0.0.{n}") for n in range(100) for gate in gates]
    assert admitted.count(None) == 128
    assert set(admitted) - {None} == {"the process's descriptor budget"}
    gates[0].release("10.0.0.0")
    assert gates[1].admit("10.0.0.0") is None


@pytest.mark.parametrize("table, says", [
    ("read_timeout = 0", "read_timeout"),
    ("keepalive_timeout = -1", "keepalive_timeout"),
    ("max_connections = -5", "max_connections"),
    ("max_connections = 10\nmax_connections_per_client = 11", "max_connections_per_client"),
])
def test_bad_limits_in_the_portal_table_are_refused_naming_the_key(table: str,
                                                                   says: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_production(f'[production]\nname = "P"\n[portal]\n{table}\n', env={})
    assert info.value.key == says and "[portal]" in str(info.value)
