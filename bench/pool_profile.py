"""Issue 27's profile of the hand-off between an item's dispatcher and its workers:
``python bench/run.py --profile-pool [--quick]`` (or ``python bench/pool_profile.py
[--quick]``).

For ``pool_size`` 1, 2, 4 and 16, on a no-op item (``bench.ops:NoopOperation``) and on an
``operations.http:HttpOperation`` item against a loopback service answering in 2 ms
(bench/servers.py's ``/sleep/2``), SQLite: a queue filled first (item switched off), an
in-process daemon started and left to settle, then the item switched on and the drain
measured from the switch to the last completion. Per message:

- **msg/s**: from the first claim to the last completion, read back from the table (as
  bench/drain.py's drains);
- **CPU per thread**: run time of each thread of this process from
  ``/proc/self/task/<tid>/schedstat`` (nanoseconds), the threads named by
  ``threading.enumerate()``: the item's dispatcher (``<item>-dispatcher``), its workers
  (``<item>-N``, summed) and everything else (the main thread's waiting loop, which looks
  every 0.2 s, the daemon's heartbeat loop…); the whole process from ``getrusage``;
- **context switches**: voluntary (the thread blocked: a wait, a lock, I/O, the GIL) and
  involuntary (preempted) from ``/proc/self/task/<tid>/status``, per thread as above, and
  the process's from ``getrusage``;
- **claims and commits**: ``Dispatcher.claims`` (claim statements that returned messages);
  calls of the store's ``complete_and_claim`` (a claim, with the pending successes
  committed in the same transaction) and ``complete_many`` (a group commit alone), counted
  by wrapping the store's public methods on the instance (outermost calls only, by the
  item's threads only); the successes they carried per call that carried any;
- **wake-ups**: calls of the dispatcher's ``wakeup.set()`` and of its ``tick()`` (the
  dispatcher's steps), counted by wrapping them on the instance;
- the HTTP server's CPU (a child process) and the share of the machine's CPU that was busy.

What the instrumentation costs (a counter per store call and per wake-up) is in the msg/s of
these runs: they are for finding what grows with ``pool_size``, not for the keys of
bench/run.py. Every table comes with the load average at its start and end.
"""
from __future__ import annotations

import argparse
import inspect
import os
import resource
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness as h
from bench.servers import ServerProcess
from bench.throughput import HTTP_GET
from engine.clock import utcnow

POOLS = (1, 2, 4, 16)
FAST_MS = 2
SETTLE_S = 0.5  # seconds the daemon runs, item switched off, before the drain
WAIT_POLL = 0.2  # seconds between two looks at the counts while draining
CLAIMS = ("complete_and_claim", "claim")  # store calls that claim
COMMITS = ("complete_and_claim", "complete_many")  # store calls that commit successes


@dataclass(frozen=True)
class Sizes:
    noop: int
    http: int


QUICK = Sizes(noop=4000, http=1500)
FULL = Sizes(noop=20_000, http=6000)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- threads ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ThreadStat:
    name: str
    cpu_s: float
    voluntary: int
    involuntary: int


def thread_stats() -> dict[int, ThreadStat]:
    """Native thread id → CPU seconds and context switches so far, for every thread of this
    process (named after ``threading.enumerate()``; ``?`` for a thread Python does not
    know)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for task in Path("/proc/self/task").iterdir():
        tid = int(task.name)
        try:
            cpu = int((task / "schedstat").read_text().split()[0]) / 1e9
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        out[tid] = ThreadStat(names.get(tid, "?"), cpu, int(fields["voluntary_ctxt_switches"]),
                              int(fields["nonvoluntary_ctxt_switches"]))
    return out


def role(name: str, item: str) -> str:
    if name == f"{item}-dispatcher":
        return "dispatcher"
    prefix = f"{item}-"
    if name.startswith(prefix) and name[len(prefix):].isdigit():
        return "worker"
    return "other"


def by_role(before: dict[int, ThreadStat], after: dict[int, ThreadStat],
            item: str) -> dict[str, list[float]]:
    """role → [CPU s, voluntary, involuntary] between two readings (a thread that started
    meanwhile counts from zero)."""
    zero = ThreadStat("", 0.0, 0, 0)
    out: dict[str, list[float]] = {r: [0.0, 0, 0] for r in ("dispatcher", "worker", "other")}
    for tid, a in after.items():
        b = before.get(tid, zero)
        totals = out[role(a.name, item)]
        totals[0] += a.cpu_s - b.cpu_s
        totals[1] += a.voluntary - b.voluntary
        totals[2] += a.involuntary - b.involuntary
    return out


# -- counting calls ---------------------------------------------------------------------------

@dataclass
class Calls:
    """Store calls by the item's dispatcher and workers (outermost calls only)."""

    item: str
    counting: bool = False
    calls: Counter[str] = field(default_factory=Counter)
    carried: Counter[str] = field(default_factory=Counter)  # successes handed to a commit
    carrying: Counter[str] = field(default_factory=Counter)  # calls that carried any
    wakeups: int = 0
    ticks: int = 0
    _depth: threading.local = field(default_factory=threading.local)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.carried.clear()
            self.carrying.clear()
            self.wakeups = self.ticks = 0
        self.counting = True

    def _mine(self) -> bool:
        return self.counting and role(threading.current_thread().name, self.item) != "other"

    def wrap_store(self, store: Any) -> None:
        for name, _attr in inspect.getmembers(type(store), inspect.isfunction):
            if not name.startswith("_"):
                setattr(store, name, self._counted(name, getattr(store, name)))

    def _counted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "n", 0)
            if depth == 0 and self._mine():
                pending = args[0] if args and isinstance(args[0], list) else \
                    kwargs.get("pending", kwargs.get("completions"))
                with self._lock:
                    self.calls[name] += 1
                    if name in COMMITS and pending:
                        self.carried[name] += len(pending)
                        self.carrying[name] += 1
            self._depth.n = depth + 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth.n = depth
        return counted

    def wrap_dispatcher(self, dispatcher: Any) -> list[str]:
        """Count ``wakeup.set()`` and ``tick()``; returns what could not be wrapped."""
        missing = []
        wakeup = getattr(dispatcher, "wakeup", None)
        if wakeup is not None and hasattr(wakeup, "set"):
            original_set = wakeup.set

            def set_() -> None:
                if self.counting:
                    with self._lock:
                        self.wakeups += 1
                original_set()
            wakeup.set = set_
        else:
            missing.append("wakeup.set")
        tick = getattr(dispatcher, "tick", None)
        if tick is not None:
            def tick_(*args: Any, **kwargs: Any) -> Any:
                if self.counting:
                    with self._lock:
                        self.ticks += 1
                return tick(*args, **kwargs)
            dispatcher.tick = tick_
        else:
            missing.append("tick")
        return missing


# -- one drain ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Profiled:
    service: str
    pool: int
    count: int
    msgs_per_s: float
    load: str
    threads: dict[str, list[float]]
    process_cpu_s: float
    process_voluntary: int
    process_involuntary: int
    claims: int | None  # Dispatcher.claims, None when the dispatcher has no such counter
    calls: Counter[str]
    carried: Counter[str]
    carrying: Counter[str]
    wakeups: int
    ticks: int
    server_cpu_s: float | None
    machine_busy: float
    workers: int
    not_completed: int
    missing: list[str]


def _production(kind: str, url: str, pool: int, http_url: str) -> tuple[str, Any, dict[str, Any]]:
    if kind in ("noop", "noop_pg"):
        return "Noop", h.load(h.production_text(database=url, item="Noop",
                                                cls="bench.ops:NoopOperation",
                                                pool_size=pool)), {"n": 1}
    return "Http", h.load(h.production_text(
        database=url, item="Http", cls="operations.http:HttpOperation", pool_size=pool,
        settings={"url": f"{http_url}/sleep/{FAST_MS}", "response_timeout": 10})), HTTP_GET


def profile_drain(work: Path, kind: str, pool: int, count: int, http_url: str,
                  server_pid: int | None, pg_url: str | None = None) -> Profiled:
    """One drain; ``kind`` ``noop_pg`` drains on ``pg_url`` (wiped), the others on SQLite."""
    url = pg_url if kind == "noop_pg" and pg_url else h.sqlite_url(
        work, f"pool-profile-{kind}-{pool}.db")
    store = h.fresh_store(url)
    item, prod, body = _production(kind, url, pool, http_url)
    calls = Calls(item)
    calls.wrap_store(store)
    try:
        store.set_item_enabled(item, False, reason="bench: fill the queue first", now=utcnow())
        h.fill(store, prod, item, body, count)
        with h.running_daemon(prod, store) as daemon:
            time.sleep(SETTLE_S)
            runner = getattr(daemon, "runners", {}).get(item)
            dispatcher = getattr(runner, "dispatcher", None)
            missing = (calls.wrap_dispatcher(dispatcher) if dispatcher is not None
                       else ["dispatcher"])
            claims0 = getattr(dispatcher, "claims", None)
            load = loadavg()
            machine = h.MachineCpu()
            server0 = h.process_cpu(server_pid) if server_pid else None
            ru0, threads0 = resource.getrusage(resource.RUSAGE_SELF), thread_stats()
            calls.reset()
            store.set_item_enabled(item, True, reason=None, now=utcnow())
            h.wait_finished(store, item, count, timeout=max(600.0, count / 10),
                            poll=WAIT_POLL)
            calls.counting = False
            ru1, threads1 = resource.getrusage(resource.RUSAGE_SELF), thread_stats()
            busy = machine.busy()
            server = h.process_cpu(server_pid) - server0 if server_pid else None
            claims1 = getattr(dispatcher, "claims", None)
            workers = sum(1 for t in threads1.values() if role(t.name, item) == "worker")
        w = h.window(store, item)
    finally:
        store.dispose()
    claims = claims1 - claims0 if isinstance(claims0, int) and isinstance(claims1, int) \
        else None
    if claims is None:
        missing.append("Dispatcher.claims")
    return Profiled(
        service=SERVICES.get(kind, f"HTTP {FAST_MS} ms"), pool=pool, count=count,
        msgs_per_s=h.rate(count, w.first_processed, w.last_completed), load=load,
        threads=by_role(threads0, threads1, item),
        process_cpu_s=(ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
        process_voluntary=ru1.ru_nvcsw - ru0.ru_nvcsw,
        process_involuntary=ru1.ru_nivcsw - ru0.ru_nivcsw, claims=claims,
        calls=calls.calls, carried=calls.carried, carrying=calls.carrying,
        wakeups=calls.wakeups, ticks=calls.ticks, server_cpu_s=server, machine_busy=busy,
        workers=workers, not_completed=w.errors, missing=missing)


# -- the tables --------------------------------------------------------------------------------

def _per(value: float | None, count: int, scale: float = 1.0, digits: int = 3) -> str:
    return "—" if value is None else f"{value * scale / count:.{digits}f}"


def _row(p: Profiled) -> str:
    n = p.count
    d, w, o = p.threads["dispatcher"], p.threads["worker"], p.threads["other"]
    claim_calls = sum(p.calls[c] for c in CLAIMS)
    commit_calls = sum(p.calls[c] for c in COMMITS)
    carrying = sum(p.carrying.values())
    per_commit = f"{sum(p.carried.values()) / carrying:.1f}" if carrying else "—"
    rows_per_claim = f"{n / p.claims:.1f}" if p.claims else "—"
    return (f"| {p.service} | {p.pool} | {n:,} | {p.msgs_per_s:,.0f} | {p.load} | "
            f"{_per(d[0], n, 1000)} | {_per(w[0], n, 1000)} | {_per(o[0], n, 1000)} | "
            f"{_per(p.process_cpu_s, n, 1000)} | "
            f"{_per(d[1], n, 1, 2)} / {_per(d[2], n, 1, 2)} | "
            f"{_per(w[1], n, 1, 2)} / {_per(w[2], n, 1, 2)} | "
            f"{_per(p.process_voluntary, n, 1, 2)} / {_per(p.process_involuntary, n, 1, 2)} | "
            f"{_per(p.claims, n)} ({rows_per_claim}) | {_per(claim_calls, n)} | "
            f"{_per(commit_calls, n)} | {per_commit} | {_per(p.wakeups, n, 1, 2)} | "
            f"{_per(p.ticks, n, 1, 2)} | {_per(p.server_cpu_s, n, 1000)} | "
            f"{100 * p.machine_busy:.0f} % |"
            + (f" {p.not_completed} NOT Completed" if p.not_completed else ""))


def format_profile(rows: list[Profiled]) -> str:
    lines = [
        "| service | pool | n | msg/s | load | CPU ms/msg: dispatcher | workers | other "
        "threads | process | ctx switches/msg vol / invol: dispatcher | workers | process | "
        "claims/msg (msgs per claim) | claim calls/msg | commit calls/msg | successes per "
        "commit | wake-ups/msg | dispatcher steps/msg | server CPU ms/msg | machine busy |",
        "|" + "---|" * 20]
    lines += [_row(p) for p in rows]
    lines += ["", "Store calls per message by the item's dispatcher and workers (outermost "
              "calls; the columns as the rows above):", ""]
    names: Counter[str] = Counter()
    for p in rows:
        names.update(p.calls)
    heads = [f"{p.service}, pool {p.pool}" for p in rows]
    lines += ["| store call | " + " | ".join(heads) + " |", "|---|" + "---|" * len(rows)]
    for name, _ in names.most_common():
        cells = " | ".join(_per(p.calls[name], p.count) if p.calls[name] else "—" for p in rows)
        lines.append(f"| `{name}` | {cells} |")
    missing = sorted({m for p in rows for m in p.missing})
    if missing:
        lines += ["", f"Not measured (the engine has no such attribute): {', '.join(missing)}."]
    return "\n".join(lines)


SERVICES = {"noop": "no-op", "noop_pg": "no-op, PostgreSQL"}


def run(*, quick: bool, pools: tuple[int, ...] = POOLS,
        kinds: tuple[str, ...] = ("noop", "http"), pg_url: str | None = None) -> str:
    """The table; with ``pg_url``, the no-op drains on PostgreSQL too (the server's own CPU
    is not counted: "server CPU" is the HTTP server's)."""
    if pg_url and "noop_pg" not in kinds:
        kinds = (*kinds, "noop_pg")
    sizes = QUICK if quick else FULL
    t0, load0 = time.monotonic(), loadavg()
    rows = []
    with ServerProcess() as servers, h.workdir() as work:
        server_pid = servers.proc.pid if servers.proc is not None else None
        for kind in kinds:
            for pool in pools:
                count = sizes.http if kind == "http" else sizes.noop
                print(f"[pool-profile] {kind}, pool {pool}, n={count:,} (load average "
                      f"{loadavg()})", file=sys.stderr, flush=True)
                rows.append(profile_drain(work, kind, pool, count, servers.urls["http"],
                                          server_pid, pg_url))
    where = "SQLite" + (", and PostgreSQL where the row says" if "noop_pg" in kinds else "")
    head = (f"### Pool profile (issue 27): {where}, queue filled first, in-process daemon; "
            f"{os.cpu_count()} CPUs; {'--quick' if quick else 'full size'}; load average "
            f"{load0} at the start")
    foot = (f"Done in {time.monotonic() - t0:.0f} s; load average {load0} at the start, "
            f"{loadavg()} at the end (other work on the machine skews the figures).")
    return "\n\n".join([head, format_profile(rows), foot])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small drains")
    parser.add_argument("--pools", type=int, nargs="+", default=list(POOLS))
    parser.add_argument("--kinds", nargs="+", choices=("noop", "http", "noop_pg"),
                        default=["noop", "http"])
    parser.add_argument("--pg-url", help="also the no-op drains on this PostgreSQL database "
                        "(wiped)")
    args = parser.parse_args(argv)
    print(run(quick=args.quick, pools=tuple(args.pools), kinds=tuple(args.kinds),
              pg_url=args.pg_url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
