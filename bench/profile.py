"""Profiles of the daemon's hot path: ``python bench/run.py --profile [--quick] [--pg-url URL]``.

Three views of the no-op path (``bench.ops:NoopOperation``) and the SOAP path
(``operations.soap:SoapOperation`` against the bench's SOAP server), pool 1, SQLite and — with
a PostgreSQL URL — PostgreSQL:

- a **census** of the database work per message of an in-process daemon, counted by a
  bench-only hot path on counting driver connections plus SQLAlchemy events for the rest
  (``bench/experiments.py``): transactions, statements, commits that wait for the disk,
  round trips to PostgreSQL, rows per claim and successes per group commit. Twice per path:
  with a producer enqueueing one message per transaction meanwhile (as ``noop_msgs_per_s``)
  and draining a queue filled first (as ``noop_drain_msgs_per_s``);
- the **cost of one committed single-row UPDATE**, with and without waiting for the disk;
- a **py-spy profile** (wall clock, idle included) of an ``encore run`` subprocess draining
  a queue filled first, with no producer: for the item's dispatcher thread and its worker
  thread separately, the engine's functions (inclusive) and the leaf frames (where the time
  is spent, by library), in milliseconds per message. No-op SQLite, SOAP SQLite, no-op
  PostgreSQL.

py-spy comes with the bench extra (``pip install -e '.[bench]'``); without it only the census
and the commit costs are printed. Every figure comes with the machine's load average.
"""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench import experiments
from bench import harness as h
from bench.servers import ServerProcess
from engine.clock import utcnow
from engine.store.sql import SqlStore

SPY_RATE = 250  # samples per second and thread
TOP_FUNCTIONS = 14  # rows per inclusive table
TOP_LEAVES = 10  # rows per leaf table
SETTLE_S = 1.0  # seconds a daemon runs, item switched off, before a drain starts
OUR_CODE = ("engine/", "adapters/", "operations/", "bench/")
_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^:()]+)(?::\d+)?\)$")
_THREAD = re.compile(r"^thread \((?P<id>[^)]*)\): (?P<name>.*)$")


@dataclass(frozen=True)
class Sizes:
    """Messages per census run, UPDATEs per commit-cost row, and messages per profiled
    drain by (path, database): enough for several seconds of samples at each path's pace."""

    census: int
    costs: int
    spy: dict[tuple[str, str], int]


QUICK = Sizes(census=2000, costs=300, spy={("noop", "SQLite"): 40000, ("soap", "SQLite"): 3000,
                                           ("noop", "PostgreSQL"): 15000})
FULL = Sizes(census=10000, costs=2000, spy={("noop", "SQLite"): 150000, ("soap", "SQLite"): 10000,
                                           ("noop", "PostgreSQL"): 50000})


def loadavg() -> str:
    """The 1-, 5- and 15-minute load averages of the machine."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def commit() -> str:
    """The checkout's commit (``+ changes`` when the working tree differs from it)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=h.ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" + uncommitted changes" if git("status", "--porcelain", "--", ".") else "")


def _production(kind: str, url: str, urls: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    """(item name, production text, message body) of the no-op or the SOAP path."""
    if kind == "noop":
        return "Noop", h.production_text(database=url, item="Noop",
                                         cls="bench.ops:NoopOperation"), {"n": 1}
    return "Soap", h.production_text(database=url, item="Soap",
                                     cls="operations.soap:SoapOperation",
                                     settings={"wsdl": urls["soap"] + "?wsdl"}), \
        {"operation": "GetResponse", "args": {"text": "x"}}


def _title(kind: str, url: str) -> str:
    return f"{'no-op' if kind == 'noop' else 'SOAP'}, {_db(url)}"


def _db(url: str) -> str:
    return "SQLite" if url.startswith("sqlite") else "PostgreSQL"


def _progress(text: str) -> None:
    print(f"[profile] {text} (load average {loadavg()})", file=sys.stderr, flush=True)


# -- census ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Census:
    """The database work an in-process daemon did for ``count`` messages."""

    title: str
    queue: str  # "live": a producer enqueues meanwhile; "filled": drained from a full queue
    count: int
    msgs_per_s: float
    load: str
    postgres: bool
    counts: Counter[str]
    kinds: Counter[str]
    kind_s: Counter[str]
    driver_s: float

    def per_message(self, *keys: str) -> float:
        return sum(self.counts[k] for k in keys) / self.count


def census(kind: str, queue: str, url: str, urls: dict[str, str], count: int) -> Census:
    """Count the daemon's database work for ``count`` messages of the ``kind`` path. The
    producer, the switch and the wait loop share the daemon's store, as in the throughput
    scenarios, but run in this thread, which the tally leaves out: only the daemon's threads
    are counted, from the first message measured to the last one finished (the start-up and
    the shutdown are left out)."""
    store = h.fresh_store(url)
    tally = experiments.install_census(store)
    item, text_, body = _production(kind, url, urls)
    prod = h.load(text_)
    try:
        if queue == "live":
            seen, start = _live(store, prod, item, body, count, tally)
        else:
            seen, start = _filled(store, prod, item, body, count, tally), None
        w = h.window(store, item)
    finally:
        store.dispose()
    return Census(title=_title(kind, url), queue=queue, count=count,
                  msgs_per_s=h.rate(count, start or w.first_processed, w.last_completed),
                  load=loadavg(), postgres=not url.startswith("sqlite"), counts=seen["counts"],
                  kinds=seen["kinds"], kind_s=seen["kind_s"], driver_s=seen["driver_s"])


def _live(store: SqlStore, prod: Any, item: str, body: dict[str, Any], count: int,
          tally: experiments.Tally) -> tuple[dict[str, Any], datetime]:
    """A producer enqueues ``count`` messages one transaction each while the daemon works
    (after one warm-up message). Returns the tally and the first enqueue's time."""
    with h.running_daemon(prod, store):
        h.warm_up(store, prod, item, body)
        tally.start()
        first, _ = h.produce(store, prod, item, body, count)
        h.wait_finished(store, item, count + 1, timeout=600)
        return tally.snapshot(), first  # before the shutdown's statements


def _filled(store: SqlStore, prod: Any, item: str, body: dict[str, Any], count: int,
            tally: experiments.Tally) -> dict[str, Any]:
    """``count`` messages queued with the item switched off, then drained (no warm-up: the
    first claim is the drain's). Returns the tally."""
    store.set_item_enabled(item, False, reason="bench: fill the queue first", now=utcnow())
    h.fill(store, prod, item, body, count)
    with h.running_daemon(prod, store):
        time.sleep(SETTLE_S)
        tally.start()
        store.set_item_enabled(item, True, reason=None, now=utcnow())
        h.wait_finished(store, item, count, timeout=600)
        return tally.snapshot()  # before the shutdown's statements


def _split(c: Census, name: str, digits: int = 3) -> str:
    """``total (hot path + SQLAlchemy)`` per message of one of the counts."""
    hot, sqla = c.per_message(f"hot.{name}"), c.per_message(f"sqla.{name}")
    return f"{hot + sqla:.{digits}f} ({hot:.{digits}f} + {sqla:.{digits}f})"


def _census_row(c: Census) -> str:
    claims, with_rows = c.counts["claims"], c.counts["claims_with_rows"]
    batch = c.counts["claimed"] / with_rows if with_rows else 0.0
    commits = c.counts["group_commits"]
    group = c.counts["successes"] / commits if commits else 0.0
    trips = _split(c, "round_trips") if c.postgres else "—"
    return (f"| {c.title} | {c.queue} | {c.count:,} | {c.msgs_per_s:,.0f} | {c.load} | "
            f"{_split(c, 'tx')} | {_split(c, 'durable')} | {_split(c, 'statements')} | "
            f"{trips} | {claims / c.count:.3f} | {batch:.1f} | {group:.1f} | "
            f"{c.driver_s / c.count * 1000:.3f} |")


def format_census(rows: list[Census]) -> str:
    """The census as two Markdown tables: the totals, then the statements by kind."""
    lines = ["### Census: database work per message (in-process daemon, pool 1)", "",
             "Per message; `a (b + c)` is the total, then the hot path (`engine/store/hotpath`) "
             "and SQLAlchemy (`engine/store/sql.py`: leases, expired claims, the heartbeat, "
             "failures). *live*: a producer enqueues one message per transaction meanwhile, "
             "on the daemon's store (as for `noop_msgs_per_s`); *filled*: the queue is filled "
             "first (as for `noop_drain_msgs_per_s`). Durable commits: those that wrote and "
             "waited for the disk (SQLite `synchronous = FULL`, PostgreSQL "
             "`synchronous_commit = on`). Statements leave out BEGIN and COMMIT. Rows per "
             "claim: mean over the claims that found work. Driver ms: time inside the "
             "sqlite3/psycopg calls of the daemon's store.", "",
             "| path | queue | n | msg/s | load | transactions | durable commits | statements "
             "| round trips | claims | rows per claim | successes per group commit | "
             "driver ms |", "|" + "---|" * 13]
    lines += [_census_row(c) for c in rows]
    kinds: Counter[str] = Counter()
    for c in rows:
        kinds.update({k: c.kind_s[k] / c.count + 1e-9 for k in c.kinds})  # by driver time
    heads = [f"{c.title}, {c.queue}" for c in rows]
    lines += ["", "By kind, per message: how many · ms inside the driver, most time first "
              "(`_PICK`, `_CLAIM`…: the hot path's prebuilt statements, named as in "
              "`engine/store/hotpath`; BEGIN and COMMIT are the hot path's on SQLite):", "",
              "| statement | " + " | ".join(heads) + " |", "|---|" + "---|" * len(rows)]
    for kind, _ in kinds.most_common():
        cells = " | ".join(f"{c.kinds[kind] / c.count:.3f} · "
                           f"{c.kind_s[kind] / c.count * 1000:.3f}" if c.kinds[kind] else "—"
                           for c in rows)
        lines.append(f"| `{kind}` | {cells} |")
    return "\n".join(lines)


# -- py-spy -----------------------------------------------------------------------------------

def py_spy() -> str | None:
    """The py-spy executable: on the PATH, or beside this interpreter (a venv's bin)."""
    found = shutil.which("py-spy")
    beside = Path(sys.executable).with_name("py-spy")
    return found or (str(beside) if beside.exists() else None)


@dataclass(frozen=True)
class Spied:
    """A drain recorded by py-spy: every thread's stacks (root → leaf, samples)."""

    title: str
    item: str
    count: int
    drain_s: float  # first claim to last completion, from the table
    record_s: float  # py-spy's start to its stop
    load: str
    threads: dict[str, list[tuple[list[str], int]]]


def spy(kind: str, url: str, urls: dict[str, str], count: int, work: Path) -> Spied:
    """Drain ``count`` messages queued first through ``encore run`` under py-spy."""
    store = h.fresh_store(url)
    item, text_, body = _production(kind, url, urls)
    path = work / f"spy-{kind}-{_db(url)}.toml"
    path.write_text(text_)
    out = work / f"spy-{kind}-{_db(url)}.txt"
    store.set_item_enabled(item, False, reason="bench: profile from the first claim", now=utcnow())
    h.fill(store, h.load(text_), item, body, count)
    try:
        with h.DaemonProcess(path, work, f"spy-{kind}") as proc:
            h.wait_started(proc)
            time.sleep(SETTLE_S)  # adapters started (the WSDL is loaded before the first claim)
            record_s = _record(proc.pid, out, lambda: _drain(store, item, count))
        w = h.window(store, item)
    finally:
        store.dispose()
    return Spied(title=_title(kind, url), item=item, count=count,
                 drain_s=(w.last_completed - w.first_processed).total_seconds(),
                 record_s=record_s, load=loadavg(), threads=read_raw(out))


def _drain(store: SqlStore, item: str, count: int) -> None:
    store.set_item_enabled(item, True, reason=None, now=utcnow())
    h.wait_finished(store, item, count, timeout=600)


def _record(pid: int, out: Path, during: Any) -> float:
    """py-spy on ``pid`` while ``during()`` runs; returns the seconds it recorded."""
    proc = subprocess.Popen(
        [py_spy() or "py-spy", "record", "--pid", str(pid), "--idle", "--threads", "--function",
         "--rate", str(SPY_RATE), "--format", "raw", "--nonblocking", "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    try:
        time.sleep(0.5)  # attached
        during()
    finally:
        record_s = time.monotonic() - t0
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    return record_s


def read_raw(path: Path) -> dict[str, list[tuple[list[str], int]]]:
    """Thread name → (frames root → leaf, samples) of a ``py-spy --format raw --threads``
    file."""
    threads: dict[str, list[tuple[list[str], int]]] = {}
    for line in path.read_text().splitlines():
        head, _, samples = line.rpartition(" ")
        first, _, frames = head.partition(";")
        match = _THREAD.match(first)
        if match is None or not frames:
            continue
        threads.setdefault(match["name"], []).append((frames.split(";"), int(samples)))
    return threads


def _parse(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame)
    return (match["func"], match["file"]) if match else (frame, "")


def _ours(file: str) -> bool:
    return any(file.startswith(p) for p in OUR_CODE)


def _library(file: str) -> str:
    """``sqlalchemy``, ``threading``, ``engine``…: the package or module of a file
    (``<string>``: code generated at run time, such as a dataclass's ``__init__``)."""
    if file == "<string>":
        return "generated"
    return file.split("/")[0].removesuffix(".py") or "?"


def waiting(role: str, frames: list[str]) -> bool:
    """True for a sample of a thread waiting for work: the worker blocked in its queue's
    ``get`` (a C call: the leaf is ``ItemRunner._work``), the dispatcher in the
    ``wakeup.wait`` of its loop."""
    funcs = [_parse(f)[0] for f in frames]
    if role == "worker":
        return funcs[-1] == "ItemRunner._work"
    for caller, callee in pairwise(funcs):
        if caller == "Dispatcher._run" and callee == "Event.wait":
            return True
    return False


@dataclass(frozen=True)
class ThreadProfile:
    """One thread's busy samples (not waiting for work), by function and by leaf."""

    total: int  # every sample of the thread, waiting included
    busy: int
    inclusive: Counter[str]
    leaf: Counter[str]
    libraries: Counter[str]


def thread_profile(role: str, stacks: list[tuple[list[str], int]]) -> ThreadProfile:
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    libraries: Counter[str] = Counter()
    total = busy = 0
    for frames, samples in stacks:
        total += samples
        if waiting(role, frames):
            continue
        busy += samples
        for name in {f"{fn} ({file})" for fn, file in map(_parse, frames) if _ours(file)}:
            inclusive[name] += samples
        fn, file = _parse(frames[-1])
        label = f"{file if _ours(file) else _library(file)}: {fn}" if file else fn
        leaf[label] += samples
        libraries[_library(file)] += samples
    return ThreadProfile(total, busy, inclusive, leaf, libraries)


def _thread_section(role: str, name: str, s: Spied) -> list[str]:
    """The tables of one thread: ms/message = samples × (recorded s / the thread's samples)
    ÷ messages."""
    p = thread_profile(role, s.threads.get(name, []))
    if not p.total:
        return [f"(no samples of thread `{name}`)"]
    ms = s.record_s / p.total * 1000 / s.count  # ms per message of one sample
    wall = s.drain_s * 1000 / s.count
    busy = p.busy * ms
    coverage = p.total / (s.record_s * SPY_RATE)
    libs = ", ".join(f"{lib} {n * ms:.3f}" for lib, n in p.libraries.most_common(6))
    lines = [f"**{role.capitalize()} thread `{name}`**: busy {busy:.3f} ms/message "
             f"({100 * busy / wall:.0f} % of the drain's wall time), waiting for work "
             f"{max(wall - busy, 0):.3f} ms/message; {100 * coverage:.0f} % of the samples "
             f"readable. Busy time by library (leaf frame), ms/message: {libs}.", "",
             "| Encore function (inclusive) | % of busy | ms/message |", "|---|---|---|"]
    for fn, n in p.inclusive.most_common(TOP_FUNCTIONS):
        lines.append(f"| `{fn}` | {100 * n / p.busy:.1f} | {n * ms:.3f} |")
    lines += ["", "| leaf frame (library: function) | % of busy | ms/message |",
              "|---|---|---|"]
    for label, n in p.leaf.most_common(TOP_LEAVES):
        lines.append(f"| `{label}` | {100 * n / p.busy:.1f} | {n * ms:.3f} |")
    return lines


def format_spy(s: Spied) -> str:
    wall = s.drain_s * 1000 / s.count
    lines = [f"### py-spy: {s.title}, pool 1 — drained n={s.count:,} at "
             f"{s.count / s.drain_s:,.0f} msg/s = {wall:.3f} ms of wall time per message "
             f"(load average {s.load})", "",
             "Wall clock, idle included (waits on sockets and the database count). A leaf "
             "frame in Encore's code is time in a C call it makes (sqlite3, a socket, the "
             "GIL).", ""]
    lines += _thread_section("dispatcher", f"{s.item}-dispatcher", s)
    lines.append("")
    lines += _thread_section("worker", f"{s.item}-1", s)
    return "\n".join(lines)


# -- all of it --------------------------------------------------------------------------------

def _censuses(work: Path, urls: dict[str, str], pg_url: str | None, n: int) -> list[Census]:
    plan = [(kind, h.sqlite_url(work, f"census-{kind}-{queue}.db"), queue)
            for kind in ("noop", "soap") for queue in ("live", "filled")]
    if pg_url:
        plan += [(kind, pg_url, queue) for kind in ("noop", "soap")
                 for queue in ("live", "filled")]
    out = []
    for kind, url, queue in plan:
        _progress(f"census {_title(kind, url)}, {queue}")
        out.append(census(kind, queue, url, urls, n))
    return out


def _spies(work: Path, urls: dict[str, str], pg_url: str | None,
           sizes: dict[tuple[str, str], int]) -> list[str]:
    plan = [(kind, h.sqlite_url(work, f"spy-{kind}.db")) for kind in ("noop", "soap")]
    if pg_url:
        plan.append(("noop", pg_url))
    out = []
    for kind, url in plan:
        _progress(f"py-spy {_title(kind, url)}")
        out.append(format_spy(spy(kind, url, urls, sizes[(kind, _db(url))], work)))
    return out


def run(*, quick: bool, pg_url: str | None) -> str:
    """Every profile, as Markdown."""
    sizes = QUICK if quick else FULL
    t0, load0 = time.monotonic(), loadavg()
    parts = [f"Profile of commit {commit()}, {'--quick' if quick else 'full size'}"
             f"{', with PostgreSQL' if pg_url else ', SQLite only (no --pg-url)'}; "
             f"load average {load0} at the start."]
    with ServerProcess() as servers, h.workdir() as work:
        urls = servers.urls
        parts.append(format_census(_censuses(work, urls, pg_url, sizes.census)))
        _progress("commit costs")
        costs = experiments.transaction_costs(work, pg_url, sizes.costs)
        parts.append(experiments.format_costs(costs, loadavg()))
        if py_spy() is None:
            parts.append("(py-spy not installed: `pip install -e '.[bench]'` for the profiles)")
        else:
            parts += _spies(work, urls, pg_url, sizes.spy)
    parts.append(f"Done in {time.monotonic() - t0:.0f} s; load average {load0} at the start, "
                 f"{loadavg()} at the end (other work on the machine skews the figures).")
    return "\n\n".join(parts)
