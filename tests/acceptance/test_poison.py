"""A message that kills or freezes its daemon is not passed around for ever (issue 22,
point 2; docs/architecture.md "Poison messages"), with real ``encore run`` processes on SQLite and
PostgreSQL.

The operation kills its own process (SIGKILL, as a segfault or the OOM killer would) on a
poison body, or hangs on it while the test stops its process (SIGSTOP, as a frozen VM or a
regex holding the GIL would) past its lease, then continues it (SIGCONT). With
``max_deliveries = 2`` and ``failure_timeout = -1`` the poison message is ``Suspended`` after
its second interrupted delivery, with an event saying so, and the messages sent with it are
delivered."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

LEASE = 2  # seconds
MAX_DELIVERIES = 2
TEXT = (f"delivery interrupted {MAX_DELIVERIES} times: the message may crash or freeze its "
        "daemon")

OPERATION = '''
import os
import signal
import time
from pathlib import Path

from engine import BusinessOperation
from engine.message import JsonMessage


class Poisonable(BusinessOperation):
    """Kills its own daemon on {"poison": "kill"}; on {"poison": "hang"} writes the file
    hanging-<pid>-<attempt> and waits until the file done-<pid>-<attempt> exists (the test
    freezes the process meanwhile: this is the work that froze it)."""

    request_class = JsonMessage

    def on_message(self, request):
        action = request.data.get("poison")
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "hang":
            name = f"{os.getpid()}-{self.retry_count}"
            Path(f"hanging-{name}").touch()
            while not Path(f"done-{name}").exists():
                time.sleep(0.02)
        return {"pid": os.getpid()}
'''

PRODUCTION = """
[production]
name = "Poison"
database = "{database}"
poll_interval = 0.05
lease_seconds = {lease}

[[items]]
name = "Item"
class = "poison_ops:Poisonable"
pool_size = {pool_size}
[items.settings]
max_deliveries = {max_deliveries}
failure_timeout = -1
retry_interval = 0.2
"""


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def setup(tmp_path: Path, database: str, *, pool_size: int) -> SqlStore:
    """The production and its operation in ``tmp_path``, the database upgraded."""
    (tmp_path / "poison_ops.py").write_text(OPERATION)
    (tmp_path / "production.toml").write_text(PRODUCTION.format(
        database=database, lease=LEASE, pool_size=pool_size, max_deliveries=MAX_DELIVERIES))
    encore("db", "upgrade", cwd=tmp_path)
    return SqlStore(database)


def send(tmp_path: Path, poison: str, innocent: int) -> tuple[int, list[int]]:
    """The poison message queued first, ``innocent`` messages behind it; their ids."""
    bodies = [{"poison": poison}] + [{"n": i} for i in range(innocent)]
    sent = json.loads(encore("send", "Item", "--many", "-", "--json", cwd=tmp_path,
                             stdin="".join(json.dumps(b) + "\n" for b in bodies)).stdout)
    ids = list(range(sent["first_id"], sent["first_id"] + len(bodies)))
    return ids[0], ids[1:]


def status(store: SqlStore, mid: int) -> str:
    row = store.get_message(mid)
    assert row is not None
    return row.status


def check_suspended(store: SqlStore, poison: int, innocent: list[int]) -> None:
    row = store.get_message(poison)
    assert row is not None and row.status == "Suspended"
    assert row.error_text is not None and row.error_text.startswith(TEXT), row.error_text
    warnings = queries.events(store, queries.EventFilter(type="Warning", message_id=poison))
    assert [e["text"] for e in warnings] == [row.error_text]
    assert all(a.ended_at is not None for a in store.attempts(poison))  # none left open
    assert [status(store, m) for m in innocent] == ["Completed"] * len(innocent)


def test_a_message_that_kills_its_daemon_is_suspended_after_max_deliveries(
        tmp_path: Path, database_url: str, stack: ExitStack) -> None:
    # a FIFO item (pool_size 1): the messages behind the poison wait for it, so it must end
    store = setup(tmp_path, database_url, pool_size=1)
    stack.callback(store.dispose)
    poison, innocent = send(tmp_path, "kill", 4)
    deaths = 0
    for _ in range(MAX_DELIVERIES + 1):
        daemon = stack.enter_context(RunningDaemon(tmp_path))
        wait_until(lambda: daemon.proc.poll() is not None  # noqa: B023
                   or status(store, poison) == "Suspended", 25, "a death or the suspension")
        if daemon.proc.poll() is not None:
            assert daemon.wait(5) == -signal.SIGKILL, daemon.output
            deaths += 1
            continue
        wait_until(lambda: all(status(store, m) == "Completed" for m in innocent), 25,
                   "the messages behind it")
        assert daemon.terminate() == 0, daemon.output
        break
    assert deaths == MAX_DELIVERIES
    check_suspended(store, poison, innocent)
    assert [a.attempt for a in store.attempts(poison)] == [1, 2]


def state(pid: int) -> str:
    """The state letter of process ``pid`` (``T``: stopped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def in_a_write(store: SqlStore) -> bool:
    """True while some client holds a write transaction open: an SQLite file's write lock,
    a PostgreSQL session idle in a transaction (its row locks)."""
    if store.is_postgres:
        with store.engine.connect() as conn:
            return bool(conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%%'").scalar())
    path = store.engine.url.database
    assert path is not None
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:  # database is locked
        return True
    finally:
        conn.close()


def freeze(store: SqlStore, pid: int) -> None:
    """SIGSTOP ``pid`` between two of its writes: a process frozen in the middle of one
    would hold its locks, and the other daemon could not take its message over (on SQLite
    the whole file) until it went on."""
    while True:
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: state(pid) == "T", 5, f"process {pid} to stop")
        if not in_a_write(store):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)


def thaw(tmp_path: Path, name: str) -> None:
    """Continue the process frozen in delivery ``name`` (``<pid>-<attempt>``), and let the
    delivery go on: it ends at once (its success is refused: its claim is gone)."""
    os.kill(int(name.split("-")[0]), signal.SIGCONT)
    (tmp_path / f"done-{name}").touch()


def test_a_message_that_freezes_its_daemons_past_their_lease_is_suspended(
        tmp_path: Path, database_url: str, stack: ExitStack) -> None:
    # two daemons: each is frozen in turn (SIGSTOP) while it delivers the poison message,
    # past its lease — the other takes it over once the lease has expired — and is
    # continued (SIGCONT) then, when the work that froze it ends. A FIFO item (pool_size 1):
    # its messages wait behind the poison.
    store = setup(tmp_path, database_url, pool_size=1)
    stack.callback(store.dispose)
    daemons = [stack.enter_context(RunningDaemon(tmp_path)) for _ in range(2)]
    for d in daemons:  # a stopped daemon must never outlive the test
        stack.callback(lambda d=d: d.proc.poll() is None and os.kill(d.proc.pid,
                                                                     signal.SIGCONT))
    wait_until(lambda: all("production Poison started" in d.output for d in daemons), 30,
               "both daemons to start")
    poison, innocent = send(tmp_path, "hang", 4)
    frozen: dict[str, int] = {}  # "<pid>-<attempt>" frozen → the poison's claim token then
    hanging: set[Path] = set()
    deadline = time.monotonic() + 40
    while status(store, poison) != "Suspended":
        assert time.monotonic() < deadline, [d.output for d in daemons]
        for marker in set(tmp_path.glob("hanging-*")) - hanging:  # a delivery of the poison
            hanging.add(marker)
            name = marker.name.removeprefix("hanging-")
            freeze(store, int(name.split("-")[0]))
            frozen[name] = store.get_message(poison).claim_token  # that delivery's claim
        for name, token in list(frozen.items()):
            if store.get_message(poison).claim_token > token:
                # claimed again, by the other daemon: its lease had expired
                thaw(tmp_path, name)
                del frozen[name]
        time.sleep(0.05)
    for name in frozen:
        thaw(tmp_path, name)
    wait_until(lambda: all(status(store, m) == "Completed" for m in innocent), 25,
               "the other messages")
    for d in daemons:
        assert d.terminate() == 0, d.output
    assert len(hanging) == MAX_DELIVERIES
    assert len({m.name.split("-")[1] for m in hanging}) == 2  # one on each daemon
    check_suspended(store, poison, innocent)
    # each frozen delivery's late success, when its daemon went on, was refused (fencing)
    assert store.get_message(poison).corresponding_id is None
