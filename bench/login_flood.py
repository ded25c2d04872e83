"""A flood of logins within the limits against a real daemon (issue 36, finding 3): what it
costs the daemon's memory and delivery.

``encore run`` (a subprocess: bench/latency.py's production, its portal on loopback, a
SQLite file) with :data:`FLOOD` users whose passwords carry argon2-cffi's default cost
(64 MiB, three passes). A probe sends a message to ``Echo`` every :data:`PROBE_EVERY` s and
reads back each one's ``time_completed - time_created`` (delivery latency, as the engine
stamped it): first for :data:`IDLE_S` s on the idle daemon, then while :data:`FLOOD` clients,
each holding the login form it fetched, post a wrong password to ``/login`` at once — five
from each of 16 loopback addresses under as many names, within the login limits — and for
:data:`AFTER_S` s after the last answer.
The daemon's resident memory is read from /proc every :data:`RSS_EVERY` s meanwhile.

Keys:

- ``login_flood_rss_mb``: the daemon's peak RSS during the flood minus its RSS before it
  (target ≤ 300; it was 2,300-2,500 before password checks were bounded).
- ``login_idle_p99_ms`` / ``login_flood_p99_ms``: delivery p99 of the idle daemon and under
  the flood (target: within 100 ms of the idle figure; it was 2.5 s).

    python bench/login_flood.py            # prints the figures and the load average
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests
from requests.adapters import HTTPAdapter
from sqlalchemy import select

from bench import harness as h
from bench import latency
from bench.report import Outcome
from engine.client import send_message
from engine.clock import as_utc, utcnow
from engine.serving.auth import hash_password
from engine.store import accounts
from engine.store.models import message_header

FLOOD = 80  # parallel logins
PER_ADDRESS = 5  # from each loopback address: the login limit, so none is throttled
PASSWORD = "a bench password"
PROBE_EVERY = 0.05  # seconds between two probe messages
IDLE_S = 5.0  # seconds of probes on the idle daemon
AFTER_S = 1.0  # seconds of probes after the flood's last answer
RSS_EVERY = 0.01  # seconds between two readings of the daemon's RSS
HTTP_TIMEOUT = 120  # seconds a login may take


class FromAddress(HTTPAdapter):
    """Connections from one loopback address (the whole of 127.0.0.0/8 is this machine)."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args: object, **kwargs: object) -> None:
        kwargs["source_address"] = (self.address, 0)
        super().init_poolmanager(*args, **kwargs)  # type: ignore[arg-type]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Probe:
    """Sends a message to Echo every PROBE_EVERY s on a thread; ids by phase."""

    def __init__(self, d: latency.Daemon) -> None:
        self.d = d
        self.phase = "idle"
        self.ids: dict[str, list[int]] = {"idle": [], "flood": []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(PROBE_EVERY):
            phase = self.phase
            self.ids[phase].append(send_message(self.d.store, self.d.production,
                                                latency.ECHO, {}, source="bench-probe"))

    def p99_ms(self, phase: str) -> float:
        ids = self.ids[phase]
        deadline = time.monotonic() + 60
        m = message_header.c
        while True:
            with self.d.store.engine.connect() as conn:
                rows = conn.execute(select(m.time_created, m.time_completed)
                                    .where(m.id.in_(ids))).all()
            if all(r.time_completed is not None for r in rows) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        spans = [(as_utc(r.time_completed) - as_utc(r.time_created)).total_seconds() * 1000
                 for r in rows if r.time_completed is not None]
        return latency.percentile(spans, 99)


def flood(d: latency.Daemon, begin: Callable[[], None]) -> Counter[int | str]:
    """FLOOD wrong-password logins at once (``begin`` called once every client has its
    login form, as they post); the count of each answer's status."""
    barrier = threading.Barrier(FLOOD, action=begin)
    statuses: Counter[int | str] = Counter()
    lock = threading.Lock()

    def one(n: int) -> None:
        status: int | str
        try:
            with requests.Session() as http:
                http.mount("http://", FromAddress(f"127.0.0.{2 + n // PER_ADDRESS}"))
                page = http.get(f"{d.base}/login", timeout=HTTP_TIMEOUT,
                                headers={"Connection": "close"})
                token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
                barrier.wait()
                status = http.post(f"{d.base}/login", allow_redirects=False,
                                   timeout=HTTP_TIMEOUT,
                                   data={"username": f"flood-{n}", "password": "wrong",
                                         "csrf_token": token, "next": "/"}).status_code
        except (requests.RequestException, threading.BrokenBarrierError, IndexError) as exc:
            status = type(exc).__name__
        with lock:
            statuses[status] += 1
    threads = [threading.Thread(target=one, args=(n,)) for n in range(FLOOD)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def login_flood(work: Path) -> Outcome:
    """The scenario: the keys above, and a row of what the flood was answered."""
    with latency.daemon(work, h.sqlite_url(work, "login_flood.db"), "login_flood") as d:
        password_hash = hash_password(PASSWORD)  # one default-cost hash for every user
        for n in range(FLOOD):
            accounts.add_user(d.store, f"flood-{n}", "operator", password_hash, now=utcnow())
        peak = [0.0]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(RSS_EVERY):
                peak[0] = max(peak[0], rss_mb(d.proc.pid))
        with Probe(d) as probe:
            time.sleep(IDLE_S)
            before = rss_mb(d.proc.pid)
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            began: list[float] = []

            def begin() -> None:
                probe.phase = "flood"
                began.extend((time.monotonic(), h.process_cpu(d.proc.pid)))
            statuses = flood(d, begin)
            seconds = time.monotonic() - began[0]
            cpu = h.process_cpu(d.proc.pid) - began[1]
            time.sleep(AFTER_S)
            sampling.set()
            sampler.join()
        idle, under = probe.p99_ms("idle"), probe.p99_ms("flood")
    growth = max(peak[0] - before, 0.0)
    answered = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items(), key=str))
    out = Outcome()
    out.key("login_flood_rss_mb", f"daemon RSS growth, {FLOOD} logins at once", round(growth, 1),
            "MiB", f"{before:.0f} → peak {peak[0]:.0f} MiB")
    out.key("login_idle_p99_ms", "delivery p99, idle daemon", round(idle, 1), "ms")
    out.key("login_flood_p99_ms", "delivery p99 under the login flood", round(under, 1), "ms")
    out.info("login flood answered", answered, "", f"in {seconds:.1f} s, {cpu:.1f} s of the "
             "daemon's CPU")
    return out


def main() -> int:
    with h.workdir() as work:
        outcome = login_flood(work)
    for row in outcome.rows:
        print(f"{row.key or row.label}: {row.value} {row.unit} {row.note}".rstrip())
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
