"""Inbound services (issue 25, docs/inbound.md), ``encore run`` in a subprocess on SQLite.

inbound_soap_ms_p50: a zeep client generated from the WSDL a SoapService serves calls
``echo`` through an ``engine.router:Router`` and a SoapOperation to a loopback spyne echo
(bench/spyne_echo.py, a process of its own); the figure is that call's p50 MINUS the p50 of
the same zeep call made directly to spyne in the same run (measured before and after the
inbound calls; the lower of the two is taken): what Encore adds. Below it, where a call's
time goes, hop by hop: from the client's clock to the call's record in the database, the
database's timestamps along the chain, and back to the client.

inbound_http_msgs_per_s: 16 client threads (``http.client``, each on its own kept-alive
connection) POST a small JSON body to an async HttpService route; messages per second
accepted (202), each a durable commit, while the same daemon delivers them to a no-op
operation (a switched-off target would not make it cheaper: its dispatcher still looks at
its queue at every announcement). Beside it, the same 16 clients post to bench/bare_intake.py
(a bare Starlette app doing one durable SQLite insert per POST, nothing delivered) in the same
run: what the machine gives a durable HTTP intake with no engine at all.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests
import zeep

from bench import harness as h
from bench import intake_http
from bench.report import Outcome
from engine.clock import as_utc
from engine.store import queries
from engine.store.inbound import calls_of
from engine.store.sql import SqlStore

CLIENTS = 16  # threads of the HTTP figure
SOAP_CALLS = {True: 100, False: 400}  # calls timed each way, by --quick
HTTP_POSTS = {True: 1600, False: 8000}  # posts of the HTTP figure, by --quick
BODY = json.dumps({"order": 1, "amount": 12.5}).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spyne() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "bench.spyne_echo"], cwd=h.ROOT,
                            env=h.cli_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def _wait_listening(url: str, timeout: float = 60, status: int = 200) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(url, timeout=2).status_code == status:
                return
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer within {timeout:g} s")
        time.sleep(0.1)


def _p50_ms(client: zeep.Client, calls: int,
            stamps: list[tuple[float, float]] | None = None) -> float:
    """The median milliseconds of ``calls`` echo calls; each call's wall-clock start and
    end (``time.time()``) appended to ``stamps``."""
    times = []
    for n in range(calls):
        t0, wall = time.perf_counter(), time.time()
        result = client.service.echo(text=f"t{n}")
        times.append((time.perf_counter() - t0) * 1000)
        if stamps is not None:
            stamps.append((wall, wall + times[-1] / 1000))
        if result != f"echo:t{n}":
            raise RuntimeError(f"unexpected answer {result!r}")
    return statistics.median(times)


def _soap_production(work: Path, wsdl_url: str, port: int) -> Path:
    (work / "echo.wsdl").write_bytes(requests.get(wsdl_url, timeout=10).content)
    path = work / "inbound-soap.toml"
    path.write_text(f'''
[production]
name = "BenchInboundSoap"
database = "{h.sqlite_url(work, 'inbound-soap.db')}"
[inbound]
port = {port}
[[items]]
name = "EchoSoap"
class = "engine.inbound:SoapService"
[items.settings]
wsdl = "{work / 'echo.wsdl'}"
path = "/soap/echo"
target = "Router"
[[items]]
name = "Router"
class = "engine.router:Router"
pool_size = 4
[items.settings]
default_target = "Echo"
[[items]]
name = "Echo"
class = "operations.soap:SoapOperation"
pool_size = 4
[items.settings]
wsdl = "{wsdl_url}"
''')
    return path


HOPS = ("zeep's call sent → SoapService has it", "caller → message committed",
        "committed → router's attempt", "router → its call",
        "call committed → operation's attempt", "operation's attempt (spyne)",
        "attempt end → call done", "call done → router done", "router done → answer",
        "answer → zeep's call returns")


def _hops(url: str, stamps: list[tuple[float, float]]) -> list[float]:
    """Median milliseconds of each of :data:`HOPS` over the inbound calls of ``stamps``
    (the client's start and end of each, in order), from the database's timestamps between
    them: where the time through Encore goes. The first and last include the client's own
    zeep work, which the direct call has too."""
    store = SqlStore(url)
    try:
        messages = queries.messages(store)
        calls = calls_of(store, [m["id"] for m in messages])
        children = {m["session_id"]: m for m in messages
                    if m["source"] == "Router" and m["kind"] == "request"}
        rows = []
        timed = [m for m in messages if m["id"] in calls][-len(stamps):]
        for (sent, returned), m in zip(stamps[-len(timed):], timed):
            child, call = children.get(m["session_id"]), calls[m["id"]]
            router, attempt = store.attempts(m["id"]), store.attempts(child["id"]) if child else []
            if not (child and router and attempt and attempt[0].ended_at and call.answered_at):
                continue
            marks = [sent, *(as_utc(t).timestamp() for t in (
                call.received_at, m["time_created"], router[0].started_at,
                child["time_created"], attempt[0].started_at, attempt[0].ended_at,
                child["time_completed"], m["time_completed"], call.answered_at)), returned]
            rows.append([(b - a) * 1000 for a, b in zip(marks, marks[1:])])
    finally:
        store.engine.dispose()
    return [statistics.median(r[i] for r in rows) if rows else float("nan")
            for i in range(len(HOPS))]


def inbound_soap(work: Path, calls: int) -> Outcome:
    out = Outcome()
    spyne, wsdl_url = _spyne()
    port = free_port()
    try:
        direct = zeep.Client(wsdl_url)
        _p50_ms(direct, 20)  # warm
        before = _p50_ms(direct, calls)
        path = _soap_production(work, wsdl_url, port)
        h.fresh_store(h.sqlite_url(work, "inbound-soap.db")).dispose()
        with h.DaemonProcess(path, work, "inbound-soap") as daemon:
            h.wait_started(daemon)
            served = f"http://127.0.0.1:{port}/soap/echo?wsdl"
            _wait_listening(served)
            inbound = zeep.Client(served)
            _p50_ms(inbound, 20)  # warm: connections, statement caches
            stamps: list[tuple[float, float]] = []
            through = _p50_ms(inbound, calls, stamps)
        after = _p50_ms(direct, calls)
    finally:
        spyne.stdin.close()  # type: ignore[union-attr]
        spyne.wait(10)
    base = min(before, after)
    hops = _hops(h.sqlite_url(work, "inbound-soap.db"), stamps)
    out.key("inbound_soap_ms_p50", "zeep → SoapService → Router → SoapOperation → spyne, "
            "minus zeep → spyne", through - base, "ms",
            f"n={calls}; through Encore {through:.2f} ms, direct {before:.2f} / {after:.2f} ms")
    for n, (name, ms) in enumerate(zip(HOPS, hops)):
        edge = n in (0, len(HOPS) - 1)  # one end is the client's clock
        out.info(f"  {name}", ms, "ms", "p50, the client's clock and the database's"
                 if edge else "p50, from the database's timestamps")
    return out


def _http_production(work: Path, port: int) -> Path:
    path = work / "inbound-http.toml"
    path.write_text(f'''
[production]
name = "BenchInboundHttp"
database = "{h.sqlite_url(work, 'inbound-http.db')}"
[inbound]
port = {port}
[[items]]
name = "OrdersHttp"
class = "engine.inbound:HttpService"
[items.settings]
routes = [{{method = "POST", path = "/orders", target = "Noop"}}]
mode = "async"
[[items]]
name = "Noop"
class = "bench.ops:NoopOperation"
pool_size = 4
''')
    return path


def _post(port: int, count: int, start: threading.Barrier, failures: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"}
    try:
        for n in range(count + 2):
            if n == 2:
                start.wait()  # two warm-up posts first
            conn.request("POST", "/orders", BODY, headers)
            reply = conn.getresponse()
            text = reply.read()
            if reply.status != 202:
                failures.append(f"{reply.status}: {text[:200]!r}")
                return
    finally:
        conn.close()


def inbound_http(work: Path, count: int) -> Outcome:
    out = Outcome()
    port = free_port()
    path = _http_production(work, port)
    h.fresh_store(h.sqlite_url(work, "inbound-http.db")).dispose()
    each = count // CLIENTS
    failures: list[str] = []
    with h.DaemonProcess(path, work, "inbound-http") as daemon:
        h.wait_started(daemon)
        _wait_listening(f"http://127.0.0.1:{port}/", status=404)  # no route at /
        start = threading.Barrier(CLIENTS + 1)
        threads = [threading.Thread(target=_post, args=(port, each, start, failures))
                   for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        start.wait()
        t0 = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - t0
        cpu = h.process_cpu(daemon.pid)
    if failures:
        raise RuntimeError(f"inbound HTTP: {failures[0]}")
    out.key("inbound_http_msgs_per_s", f"{CLIENTS} clients POST to an async HttpService, "
            "SQLite, durable", each * CLIENTS / seconds, "msg/s",
            f"n={each * CLIENTS:,}; the daemon used {cpu:.1f} s of CPU in all")
    bare, base = intake_http._bare(work)  # the same load on a bare durable endpoint
    try:
        peer = intake_http._concurrent_rate(base, "none", count, CLIENTS)
    finally:
        intake_http.stop(bare)
    out.info("  bare Starlette/uvicorn, one durable insert per POST, the same load", peer,
             "msg/s", "bench/bare_intake.py in a subprocess, no delivery; "
             f"the HttpService ÷ it: {each * CLIENTS / seconds / peer:.2f}")
    return out


def inbound(work: Path, *, quick: bool) -> Outcome:
    """Both figures (``bench/run.py --only inbound``)."""
    out = Outcome()
    for part in (inbound_soap(work, SOAP_CALLS[quick]), inbound_http(work, HTTP_POSTS[quick])):
        out.values.update(part.values)
        out.rows += part.rows
    out.info("load average after", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return out


def main() -> None:
    """``python -m bench.inbound [--quick]``: both figures, with the load average."""
    with h.workdir() as work:
        for row in inbound(work, quick="--quick" in sys.argv).rows:
            value = f"{row.value:.2f}" if isinstance(row.value, float) else row.value
            print(f"{row.key or row.label}: {value} {row.unit} {row.note}".rstrip())


if __name__ == "__main__":
    main()
