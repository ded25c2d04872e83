"""A flood of logins within the limits (issue 36, finding 3), on SQLite (dialect-free): 80
parallel logins, five from each of 16 loopback addresses under 80 names, to a portal over
uvicorn and to an inbound service with ``auth = "basic"``. Each password check holds 64 MiB
(argon2-cffi's default memory cost); the process's :class:`HashGate` lets only its slots
check at once, the others are answered 429 with ``Retry-After`` and their attempt is taken
back, and the process's peak memory grows by a few checks' worth, not by 40 of them."""
from __future__ import annotations

import base64
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import requests
from argon2 import PasswordHasher
from requests.adapters import HTTPAdapter
from sqlalchemy import select
from starlette.testclient import TestClient

from engine.clock import utcnow
from engine.config.production import PortalConfig
from engine.portal import create_app
from engine.portal.server import PortalServer
from engine.process import BusinessProcess
from engine.serving import auth
from engine.serving.hash_gate import HASH_WAIT, process_gate
from engine.store import accounts, queries
from engine.store.models import login_guess
from engine.store.sql import SqlStore
from tests.integration.inbound_support import free_port, running
from tests.portal_support import form_token, login, production

pytestmark = pytest.mark.dialect_free

FLOOD = 80  # parallel logins
PER_ADDRESS = 5  # from each address: LOGIN_FAILURES, so the flood stays within the limits
PASSWORD = "the right one"
HASH_MIB = 64  # memory one check holds: argon2-cffi's default memory_cost, in MiB
MOST_AT_ONCE = 4  # checks under way at once at most, on any machine (docs/security.md)
# peak growth allowed: those checks and as many again of slack (threads, buffers, the
# allocator); without the gate the flood held 40 checks at once, 2.5 GiB
SLACK_CHECKS = 4
HTTP_TIMEOUT = 60  # seconds one call may take on a loaded machine


class CountingHasher(PasswordHasher):
    """argon2 with its default memory cost (one pass, one lane: quicker, as heavy), counting
    the checks made and the most under way at once."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=HASH_MIB * 1024, parallelism=1)
        self.checks = self.under_way = self.peak = 0
        self._lock = threading.Lock()

    def verify(self, hash: str | bytes, password: str | bytes) -> bool:
        with self._lock:
            self.checks += 1
            self.under_way += 1
            self.peak = max(self.peak, self.under_way)
        try:
            return super().verify(hash, password)
        finally:
            with self._lock:
                self.under_way -= 1


class FromAddress(HTTPAdapter):
    """Connections from a given loopback address (all of 127.0.0.0/8 is this machine)."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["source_address"] = (self.address, 0)
        super().init_poolmanager(*args, **kwargs)


class Sink(BusinessProcess):
    """Takes any message and answers nothing."""

    def on_request(self, request: Any) -> Any:
        return None


@pytest.fixture
def hasher(monkeypatch: pytest.MonkeyPatch) -> CountingHasher:
    counting = CountingHasher()
    monkeypatch.setattr(auth, "_hasher", counting)
    return counting


def flood_users(store: SqlStore, hasher: CountingHasher) -> list[tuple[str, str]]:
    """FLOOD users, each with PASSWORD (one hash for all: quick to make, as slow to check);
    (name, address) for each login of the flood."""
    password_hash = hasher.hash(PASSWORD)
    logins = []
    for n in range(FLOOD):
        accounts.add_user(store, f"user-{n}", "operator", password_hash, now=utcnow())
        logins.append((f"user-{n}", f"127.0.0.{2 + n // PER_ADDRESS}"))
    return logins


def peak_growth_mib(run: Callable[[], Any]) -> tuple[float, Any]:
    """The growth of this process's peak resident memory while ``run`` runs, in MiB, and
    what it returned (Linux: the peak is reset through /proc/self/clear_refs)."""
    def rss(field: str) -> int:
        with open("/proc/self/status") as status:
            match = re.search(rf"{field}:\s+(\d+) kB", status.read())
        assert match, field
        return int(match.group(1))
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    before = rss("VmRSS")
    result = run()
    return (rss("VmHWM") - before) / 1024, result


Login = Callable[[str, str, threading.Barrier], requests.Response]


def in_parallel(call: Login, logins: list[tuple[str, str]]) -> list[requests.Response | str]:
    """``call(name, address)`` for every login at once (after a barrier); the answers."""
    barrier = threading.Barrier(len(logins))
    answers: list[requests.Response | str] = [""] * len(logins)

    def one(n: int) -> None:
        name, address = logins[n]
        try:
            answers[n] = call(name, address, barrier)
        except requests.RequestException as exc:
            answers[n] = f"{type(exc).__name__}: {exc}"
    threads = [threading.Thread(target=one, args=(n,)) for n in range(len(logins))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HTTP_TIMEOUT * 2)
    return answers


def guesses_left(store: SqlStore, keys: str = "addr:%") -> int:
    """The attempts counted against the keys ``LIKE keys`` (addresses by default)."""
    g = login_guess.c
    with store.engine.connect() as conn:
        rows = conn.execute(select(g.guesses).where(g.key.like(keys))).all()
    return sum(row.guesses for row in rows)


def assert_bounded(answers: list[requests.Response | str], hasher: CountingHasher,
                   passed: int, growth: float) -> None:
    """Every login answered ``passed`` (its password checked) or 429 with Retry-After
    (not checked); never more checks at once than the gate's slots; memory bounded."""
    statuses = [a if isinstance(a, str) else a.status_code for a in answers]
    assert set(statuses) <= {passed, 429}, statuses
    busy = [a for a in answers if not isinstance(a, str) and a.status_code == 429]
    assert all(int(a.headers["retry-after"]) >= 1 for a in busy)
    assert all("too many logins at once" in a.text for a in busy)
    assert hasher.checks == statuses.count(passed)
    assert 1 <= hasher.peak <= min(process_gate().slots, MOST_AT_ONCE)
    assert growth < (MOST_AT_ONCE + SLACK_CHECKS) * HASH_MIB, growth


@pytest.fixture
def portal_url(store: SqlStore) -> Iterator[str]:
    config = PortalConfig.from_validated({"port": free_port()})
    server = PortalServer(store, production(store.url), config,
                          env={"ENCORE_PORTAL_SECRET": "shared-secret"})
    server.start()
    yield server.url
    server.stop()


def test_80_parallel_portal_logins_check_a_few_passwords_at_once_and_refuse_the_rest_with_429(
        store: SqlStore, hasher: CountingHasher, portal_url: str) -> None:
    logins = flood_users(store, hasher)

    def log_in(name: str, address: str, barrier: threading.Barrier) -> requests.Response:
        with requests.Session() as http:
            http.mount("http://", FromAddress(address))
            page = http.get(f"{portal_url}/login", headers={"Connection": "close"},
                            timeout=HTTP_TIMEOUT)
            barrier.wait()
            return http.post(f"{portal_url}/login", allow_redirects=False,
                             timeout=HTTP_TIMEOUT,
                             data={"username": name, "password": "wrong",
                                   "csrf_token": form_token(page.text), "next": "/"})
    growth, answers = peak_growth_mib(lambda: in_parallel(log_in, logins))
    assert_bounded(answers, hasher, 401, growth)
    assert guesses_left(store) == hasher.checks  # a refused login's attempt was taken back


def test_80_parallel_inbound_basic_callers_are_bounded_as_the_portal_s_logins(
        store: SqlStore, hasher: CountingHasher) -> None:
    logins = flood_users(store, hasher)
    port = free_port()
    items = f'''
[[items]]
name = "In"
class = "engine.inbound:HttpService"
[items.settings]
routes = [{{method = "POST", path = "/in", target = "Sink"}}]
mode = "async"
auth = "basic"

[[items]]
name = "Sink"
class = "{__name__}:Sink"
'''

    def call(name: str, address: str, barrier: threading.Barrier) -> requests.Response:
        credentials = base64.b64encode(f"{name}:{PASSWORD}".encode()).decode()
        with requests.Session() as http:
            http.mount("http://", FromAddress(address))
            barrier.wait()
            return http.post(f"http://127.0.0.1:{port}/in", json={"n": name},
                             headers={"Authorization": f"Basic {credentials}"},
                             timeout=HTTP_TIMEOUT)
    with running(store, items, port):
        growth, answers = peak_growth_mib(lambda: in_parallel(call, logins))
    assert_bounded(answers, hasher, 202, growth)
    assert len(queries.messages(store, item="Sink")) == hasher.checks


def test_a_login_that_finds_no_slot_is_refused_429_and_not_counted(
        store: SqlStore, hasher: CountingHasher) -> None:
    logins = flood_users(store, hasher)
    app = create_app(store, production(store.url), secret="test-secret", env={})
    gate = process_gate()
    with TestClient(app) as client:
        with ExitStack() as held:  # every slot taken, as by checks under way
            for _ in range(gate.slots):
                held.enter_context(gate.slot())
            refused = login(client, logins[0][0], PASSWORD)
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= HASH_WAIT
        assert "too many logins at once" in refused.text
        assert hasher.checks == 0 and guesses_left(store, "%") == 0  # name and address
        assert login(client, logins[0][0], PASSWORD).status_code == 303  # a slot is free
    assert hasher.checks == 1
