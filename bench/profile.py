"""Profiles of the daemon's hot paths: ``python bench/run.py --profile [--quick]``.

Two views of the no-op and the SOAP paths (pool 1, SQLite; the no-op path on PostgreSQL too):

- a **census** of the database work per message, counted with SQLAlchemy events on an
  in-process daemon: transactions, statements by kind, connection checkouts, driver time;
- a **py-spy profile** (wall clock, idle included) of the worker thread of an ``encore run``
  subprocess draining a queue: the share of the engine's functions (inclusive) and of the
  libraries where the time is spent (leaf frame), in milliseconds per message.

py-spy is optional (``pip install py-spy``); without it only the census is printed.
"""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import event

from bench import experiments
from bench import harness as h
from bench.servers import ServerProcess
from engine.clock import utcnow
from engine.store.sql import SqlStore

SPY_RATE = 250  # samples per second
TOP = 18  # rows per profile table
OUR_CODE = ("engine/", "adapters/", "operations/", "bench/")
_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^:()]+)(?::\d+)?\)$")


def _production(kind: str, url: str, urls: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    """(item name, production text, message body) of the no-op or the SOAP path."""
    if kind == "noop":
        return "Noop", h.production_text(database=url, item="Noop",
                                         cls="bench.ops:NoopOperation"), {"n": 1}
    return "Soap", h.production_text(database=url, item="Soap",
                                     cls="operations.soap:SoapOperation",
                                     settings={"wsdl": urls["soap"] + "?wsdl"}), \
        {"operation": "GetResponse", "args": {"text": "x"}}


# -- census ---------------------------------------------------------------------------------

def _statement_kind(statement: str) -> str:
    """``VERB table`` of an SQL statement, e.g. ``UPDATE message_header``."""
    words = statement.replace("(", " ").split()
    upper = [w.upper() for w in words]
    verb = upper[0] if upper else "?"
    marker = {"UPDATE": "UPDATE", "INSERT": "INTO", "DELETE": "FROM"}.get(verb, "FROM")
    table = words[upper.index(marker) + 1] if marker in upper[:-1] else "?"
    return f"{verb} {table}"


def census(kind: str, url: str, urls: dict[str, str], count: int) -> dict[str, Any]:
    """Database work per message of an in-process daemon. The producer and the wait loop
    use a store of their own, so only the daemon's statements are counted."""
    store = h.fresh_store(url)
    client = SqlStore(url)
    item, text_, body = _production(kind, url, urls)
    prod = h.load(text_)
    kinds: Counter[str] = Counter()
    totals = {"begin": 0, "commit": 0, "checkout": 0, "driver_s": 0.0}
    started: dict[int, float] = {}

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        kinds[_statement_kind(statement)] += 1
        started[id(cursor)] = time.perf_counter()

    def after(conn: Any, cursor: Any, *args: Any) -> None:
        totals["driver_s"] += time.perf_counter() - started.pop(id(cursor), time.perf_counter())

    def counter(name: str) -> Any:
        def bump(*args: Any) -> None:
            totals[name] += 1
        return bump

    try:
        with h.running_daemon(prod, store):
            h.warm_up(client, prod, item, body)
            event.listen(store.engine, "before_cursor_execute", before)
            event.listen(store.engine, "after_cursor_execute", after)
            event.listen(store.engine, "begin", counter("begin"))
            event.listen(store.engine, "commit", counter("commit"))
            event.listen(store.engine.pool, "checkout", counter("checkout"))
            first, _ = h.produce(client, prod, item, body, count)
            h.wait_finished(client, item, count + 1, timeout=600)
            seen_kinds, seen = Counter(kinds), dict(totals)  # before the shutdown's statements
        w = h.window(client, item)
    finally:
        client.dispose()
        store.dispose()
    return {"kinds": seen_kinds, "totals": seen, "count": count,
            "msgs_per_s": h.rate(count, first, w.last_completed)}


def format_census(title: str, c: dict[str, Any]) -> str:
    n, t = c["count"], c["totals"]
    lines = [(f"### Census: {title} — {c['msgs_per_s']:.0f} msg/s, n={n} "
              "(producer and wait loop included)"),
             (f"transactions (BEGIN) per message: {t['begin'] / n:.2f}; COMMITs: "
              f"{t['commit'] / n:.2f}; pool checkouts: {t['checkout'] / n:.2f}; "
              f"statements: {sum(c['kinds'].values()) / n:.2f}; driver time "
              f"{t['driver_s'] / n * 1000:.3f} ms/message"),
             "", "| statement | per message |", "|---|---|"]
    for name, value in c["kinds"].most_common():
        lines.append(f"| `{name}` | {value / n:.2f} |")
    return "\n".join(lines)


# -- py-spy -----------------------------------------------------------------------------------

def spy(kind: str, url: str, urls: dict[str, str], count: int, work: Path) -> dict[str, Any]:
    """Drain ``count`` queued messages through ``encore run`` under py-spy."""
    store = h.fresh_store(url)
    item, text_, body = _production(kind, url, urls)
    prod = h.load(text_)
    path = work / f"spy-{kind}.toml"
    path.write_text(text_)
    out = work / f"spy-{kind}.txt"
    store.set_item_enabled(item, False, reason="bench: profile from the first claim", now=utcnow())
    h.produce(store, prod, item, body, count)
    try:
        with h.DaemonProcess(path, work, f"spy-{kind}") as proc:
            h.wait_started(proc)
            time.sleep(1.0)  # adapters started (the WSDL is loaded before the first claim)
            spy_proc = subprocess.Popen(
                ["py-spy", "record", "--pid", str(proc.pid), "--idle", "--threads", "--function",
                 "--rate", str(SPY_RATE), "--format", "raw", "--nonblocking", "-o", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            t0 = time.monotonic()
            store.set_item_enabled(item, True, reason=None, now=utcnow())
            h.wait_finished(store, item, count, timeout=600)
            wall = time.monotonic() - t0
            spy_proc.send_signal(signal.SIGINT)
            spy_proc.wait(30)
        w = h.window(store, item)
    finally:
        store.dispose()
    return {"stacks": _read_raw(out, f"{item}-1"), "count": count, "wall": wall,
            "msgs_per_s": h.rate(w.completed, w.first_processed, w.last_completed)}


def _read_raw(path: Path, thread: str) -> list[tuple[list[str], int]]:
    """(frames root → leaf, samples) of the worker thread named ``thread``."""
    stacks = []
    for line in path.read_text().splitlines():
        head, _, samples = line.rpartition(" ")
        name, _, frames = head.partition(";")
        if not name.endswith(f": {thread}"):
            continue
        stacks.append((frames.split(";"), int(samples)))
    return stacks


def _parse(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame)
    return (match["func"], match["file"]) if match else (frame, "")


def _library(file: str) -> str:
    if any(file.startswith(p) for p in OUR_CODE):
        return file
    return file.split("/")[0].removesuffix(".py") or "?"


def format_spy(title: str, s: dict[str, Any]) -> str:
    n = s["count"]
    # Waiting for work happens only before the first claim and after the last one here.
    idle = sum(c for frames, c in s["stacks"] if any("ItemRunner._idle" in f for f in frames))
    stacks = [(frames, c) for frames, c in s["stacks"]
              if not any("ItemRunner._idle" in f for f in frames)]
    total = sum(samples for _, samples in stacks) or 1
    # py-spy --nonblocking drops samples it could not read, so shares come from the samples
    # and milliseconds from the measured drain rate: ms/message = share × wall time/message.
    ms_per_msg = 1000 / s["msgs_per_s"]
    coverage = (total + idle) / SPY_RATE / s["wall"]
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    for frames, samples in stacks:
        ours = {f"{func} ({file})" for func, file in map(_parse, frames)
                if any(file.startswith(p) for p in OUR_CODE)}
        for name in ours:
            inclusive[name] += samples
        func, file = _parse(frames[-1])
        leaf[f"{_library(file)}: {func}" if file else func] += samples
    lines = [(f"### py-spy: {title} — {s['msgs_per_s']:.0f} msg/s draining n={n} = "
              f"{ms_per_msg:.2f} ms of wall time per message in the worker thread (waits on "
              "sockets and the database included; waiting for work before the first claim and "
              f"after the last left out; {100 * coverage:.0f} % of the samples were readable)"),
             "", "| Encore function (inclusive) | % of worker time | ms/message |",
             "|---|---|---|"]
    for name, samples in inclusive.most_common(TOP):
        lines.append(f"| `{name}` | {100 * samples / total:.1f} | "
                     f"{samples / total * ms_per_msg:.3f} |")
    lines += ["", "| leaf frame (where the time is spent) | % | ms/message |", "|---|---|---|"]
    for name, samples in leaf.most_common(TOP):
        lines.append(f"| `{name}` | {100 * samples / total:.1f} | "
                     f"{samples / total * ms_per_msg:.3f} |")
    return "\n".join(lines)


def run(*, quick: bool, pg_url: str | None) -> str:
    """Every profile, as Markdown."""
    n_census, n_spy = (300, 1000) if quick else (2000, 4000)
    parts = []
    with ServerProcess() as servers, h.workdir() as work:
        urls = servers.urls
        for kind in ("noop", "soap"):
            url = h.sqlite_url(work, f"census-{kind}.db")
            parts.append(format_census(f"{kind}, SQLite, pool 1", census(kind, url, urls,
                                                                        n_census)))
        if pg_url:
            parts.append(format_census("noop, PostgreSQL, pool 1",
                                       census("noop", pg_url, urls, n_census)))
        parts.append(experiments.format_costs(experiments.transaction_costs(work)))
        parts.append(experiments.format_variants(
            experiments.variants(work, pg_url, n_census)))
        if shutil.which("py-spy") is None:
            parts.append("(py-spy not installed: `pip install py-spy` for the profiles)")
            return "\n\n".join(parts)
        for kind in ("noop", "soap"):
            url = h.sqlite_url(work, f"spy-{kind}.db")
            parts.append(format_spy(f"{kind}, SQLite, pool 1",
                                    spy(kind, url, urls, n_spy, work)))
        if pg_url:
            parts.append(format_spy("noop, PostgreSQL, pool 1",
                                    spy("noop", pg_url, urls, n_spy, work)))
    return "\n\n".join(parts)
