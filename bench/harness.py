"""What every scenario needs: fresh databases, a daemon in this process or as ``encore run``
subprocesses, a producer, and throughput read back from the SQL tables.

Throughput is always measured from timestamps the engine itself stored (``time_completed``,
``time_processed``) against wall-clock UTC, never from polling latency.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, select, text

from engine.cli.run import GIL_SWITCH_INTERVAL
from engine.client import send_message, send_messages
from engine.clock import as_utc, utcnow
from engine.config.production import ProductionConfig, parse_production
from engine.runtime.daemon import Daemon
from engine.store.database import normalise_url
from engine.store.models import FINAL_STATUSES, message_header
from engine.store.sql import SqlStore

ROOT = Path(__file__).resolve().parents[1]
BENCH_POLL_INTERVAL = 0.05  # seconds: an idle worker's look at its queue (default is 0.5)
WAIT_POLL = 0.05  # seconds between two looks at the message counts while waiting
STALL_S = 60.0  # seconds without a finished message after which a wait gives up
FILL_BATCH = 500  # messages per send_messages transaction when a queue is filled up front


def sqlite_url(directory: Path, name: str = "bench.db") -> str:
    return f"sqlite:///{directory / name}"


def reset_postgres(url: str) -> None:
    """Wipe the benchmark database: every table goes."""
    engine = create_engine(normalise_url(url))
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def fresh_store(url: str) -> SqlStore:
    """A store at the latest schema on an empty database (the PostgreSQL one is wiped)."""
    if not url.startswith("sqlite"):
        reset_postgres(url)
    store = SqlStore(url)
    store.upgrade()
    return store


def production_text(*, database: str, item: str, cls: str, pool_size: int = 1,
                    settings: dict[str, Any] | None = None,
                    poll_interval: float | None = BENCH_POLL_INTERVAL) -> str:
    """A one-item production file."""
    lines = ["[production]", 'name = "Bench"', f"database = {_toml(database)}"]
    if poll_interval is not None:
        lines.append(f"poll_interval = {poll_interval}")
    lines += ["", "[[items]]", f"name = {_toml(item)}", f"class = {_toml(cls)}",
              f"pool_size = {pool_size}", "[items.settings]"]
    lines += [f"{key} = {_toml(value)}" for key, value in (settings or {}).items()]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


@contextmanager
def running_daemon(production: ProductionConfig, store: SqlStore) -> Iterator[Daemon]:
    """A :class:`Daemon` started in this process (stopped on the way out), under the switch
    interval `encore run` gives its own process."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    daemon = Daemon(production, store=store, env={})
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def load(text_: str) -> ProductionConfig:
    return parse_production(text_, env={})


# -- counting --------------------------------------------------------------------------------

def finished_count(store: SqlStore, target: str) -> int:
    h = message_header.c
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).where(
            h.target == target, h.kind == "request", h.status.in_(FINAL_STATUSES))).scalar())


def queued_count(store: SqlStore, target: str) -> int:
    h = message_header.c
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).where(
            h.target == target, h.kind == "request", h.status == "Queued")).scalar())


def wait_finished(store: SqlStore, target: str, count: int, timeout: float, *,
                  poll: float = WAIT_POLL) -> None:
    """Wait until ``count`` requests of ``target`` have finished, looking every ``poll`` s.
    Fails after ``timeout`` s, or sooner when nothing finished for ``STALL_S`` s (a daemon
    that cannot work)."""
    deadline = time.monotonic() + timeout
    last, last_change = -1, time.monotonic()
    while (done := finished_count(store, target)) < count:
        now = time.monotonic()
        if done != last:
            last, last_change = done, now
        if now > deadline or now - last_change > STALL_S:
            raise TimeoutError(f"{target}: only {done} of {count} messages finished "
                               f"({'stalled' if now <= deadline else 'timed out'}); see the "
                               "daemon's log")
        time.sleep(poll)


@dataclass(frozen=True)
class Window:
    """When the first message was claimed and the last one finished (aware UTC)."""

    first_processed: datetime
    last_completed: datetime
    completed: int
    errors: int


def window(store: SqlStore, target: str) -> Window:
    h = message_header.c
    with store.engine.connect() as conn:
        first, last = conn.execute(select(func.min(h.time_processed), func.max(h.time_completed))
                                   .where(h.target == target, h.kind == "request")).one()
        completed = conn.execute(select(func.count()).where(
            h.target == target, h.kind == "request", h.status == "Completed")).scalar()
        errors = conn.execute(select(func.count()).where(
            h.target == target, h.kind == "request", h.status != "Completed")).scalar()
    return Window(as_utc(first), as_utc(last), int(completed), int(errors))


def rate(count: int, start: datetime, end: datetime) -> float:
    return count / max((end - start).total_seconds(), 1e-9)


# -- producing -------------------------------------------------------------------------------

def produce(store: SqlStore, production: ProductionConfig, target: str, body: dict[str, Any],
            count: int) -> tuple[datetime, float]:
    """Enqueue ``count`` copies of ``body`` as fast as the public intake allows (one
    committed transaction each, as ``encore send`` does). Returns (UTC time of the first
    enqueue, seconds the enqueueing took)."""
    started, t0 = utcnow(), time.perf_counter()
    for _ in range(count):
        send_message(store, production, target, body, source="bench")
    return started, time.perf_counter() - t0


def fill(store: SqlStore, production: ProductionConfig, target: str, body: dict[str, Any],
         count: int, batch: int = FILL_BATCH) -> float:
    """Enqueue ``count`` copies of ``body`` through ``send_messages``, ``batch`` per
    transaction. Returns the seconds it took."""
    t0 = time.perf_counter()
    for start in range(0, count, batch):
        send_messages(store, production, target, [body] * min(batch, count - start),
                      source="bench")
    return time.perf_counter() - t0


def daemon_throughput(store: SqlStore, production: ProductionConfig, target: str,
                      body: dict[str, Any], count: int, *, timeout: float = 600) -> dict[str, Any]:
    """Messages/s through an in-process daemon, from the first enqueue to the last
    completion, with every message enqueued up front by a producer running flat out."""
    done_before = finished_count(store, target)  # a history the scenario put there
    with running_daemon(production, store):
        warm_up(store, production, target, body)
        first, enqueue_s = produce(store, production, target, body, count)
        wait_finished(store, target, done_before + count + 1, timeout)
    w = window(store, target)
    return {"msgs_per_s": rate(count, first, w.last_completed), "count": count,
            "enqueue_s": enqueue_s, "seconds": (w.last_completed - first).total_seconds(),
            "not_completed": w.errors}


def warm_up(store: SqlStore, production: ProductionConfig, target: str,
            body: dict[str, Any], timeout: float = 60) -> None:
    """One message through, so that adapters are started and connections open."""
    done_before = finished_count(store, target)
    send_message(store, production, target, body, source="bench-warm-up")
    wait_finished(store, target, done_before + 1, timeout)


# -- ``encore run`` as a subprocess ------------------------------------------------------------

def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("ENCORE_DATABASE_URL", None)
    env.update(extra or {})
    return env


class DaemonProcess:
    """``python -m engine.cli -p FILE run`` in the background; its log in ``workdir``."""

    def __init__(self, production_file: Path, workdir: Path, label: str = "daemon") -> None:
        self.log_path = workdir / f"{label}-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine.cli", "-p", str(production_file), "run"],
            cwd=workdir, env=cli_env(), stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def output(self) -> str:
        return self.log_path.read_text()

    def __enter__(self) -> DaemonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_started(daemon: DaemonProcess, timeout: float = 60) -> None:
    """Wait for the daemon's "production … started" log line."""
    deadline = time.monotonic() + timeout
    while "started" not in daemon.output():
        if not daemon.alive():
            raise RuntimeError(f"encore run exited early:\n{daemon.output()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"encore run did not start within {timeout:g} s")
        time.sleep(0.05)


class MachineCpu:
    """Share of the machine's CPU time (every core) that was busy between two readings of
    /proc/stat: 1.0 means every core was busy all along."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = values[3] + values[4]  # idle + iowait
        return sum(values), idle

    def busy(self) -> float:
        total, idle = self._read()
        d_total, d_idle = total - self._start[0], idle - self._start[1]
        return 1 - d_idle / d_total if d_total else 0.0


def process_cpu(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads) in seconds; 0 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu() -> float:
    """CPU seconds used so far by the processes named ``postgres`` on this machine (the
    server's backends: those of a connection that closed meanwhile are not counted)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    total += process_cpu(int(entry.name))
            except OSError:
                continue
    return total


@contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="encore-bench-") as name:
        yield Path(name)
