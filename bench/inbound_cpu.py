"""Where one inbound SOAP call's CPU goes, thread by thread: ``python bench/inbound_cpu.py
[--calls N]``.

bench/inbound.py's SOAP production (``SoapService`` → ``Router`` → ``SoapOperation`` → a
loopback spyne echo) in an ``encore run`` subprocess on SQLite; a zeep client generated from
the served WSDL makes ``N`` calls (after 30 to warm up). Each daemon thread's run time is read
from ``/proc/PID/task/TID/schedstat`` (nanoseconds) before and after, and its name from
``py-spy dump`` (the bench extra); threads of one kind (``Echo-1`` … ``Echo-4``) are summed.
Printed in milliseconds of CPU per call, with the calls' p50 and the load average.

``--http``: bench/inbound.py's async HTTP production instead (an ``HttpService`` route, mode
``async``, to a no-op operation with pool 4), under 16 clients for ``--seconds`` after a
warm-up: ``wrk`` (16 connections, two threads) where it is on the PATH — a client in C,
which leaves the daemon nearly the whole machine — else 16 ``http.client`` threads as
``inbound_http_msgs_per_s`` uses. Printed in microseconds of CPU per request, by thread,
with the requests per second; ``--http --path /nothing`` posts to a path no route serves
(404s: the HTTP server alone, nothing committed).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import zeep

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness as h
from bench import inbound as ib
from bench.profile import py_spy


def thread_names(pid: int) -> dict[int, str]:
    """TID → thread name, from ``py-spy dump`` (empty without py-spy)."""
    spy = py_spy()
    if spy is None:
        return {}
    dump = subprocess.run([spy, "dump", "-p", str(pid)], capture_output=True, text=True,
                          check=False).stdout
    return {int(tid, 0): name for tid, name in
            re.findall(r'Thread (\S+) \(\w+\): "([^"]+)"', dump)}


def thread_cpu_ms(pid: int) -> dict[int, float]:
    """TID → milliseconds the thread has run."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text()
            out[int(tid)] = int(stat.split()[0]) / 1e6
        except OSError:  # the thread ended meanwhile
            pass
    return out


def measure(calls: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="encore-inbound-cpu-"))
    spyne, wsdl_url = ib._spyne()
    port = ib.free_port()
    try:
        path = ib._soap_production(work, wsdl_url, port)
        h.fresh_store(h.sqlite_url(work, "inbound-soap.db")).dispose()
        with h.DaemonProcess(path, work, "inbound-cpu") as daemon:
            h.wait_started(daemon)
            served = f"http://127.0.0.1:{port}/soap/echo?wsdl"
            ib._wait_listening(served)
            client = zeep.Client(served)
            for _ in range(30):
                client.service.echo(text="warm")
            names = thread_names(daemon.pid)
            before = thread_cpu_ms(daemon.pid)
            times = []
            for n in range(calls):
                t0 = time.perf_counter()
                client.service.echo(text=f"t{n}")
                times.append((time.perf_counter() - t0) * 1000)
            after = thread_cpu_ms(daemon.pid)
    finally:
        spyne.stdin.close()  # type: ignore[union-attr]
        spyne.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    kinds = _by_kind(names, before, after, calls)
    print(f"{calls} calls, p50 {statistics.median(times):.2f} ms; load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{sum(kinds.values()):8.3f} ms of the daemon's CPU per call, of which:")
    for kind, ms in sorted(kinds.items(), key=lambda kv: -kv[1]):
        if ms >= 0.005:
            print(f"{ms:8.3f}  {kind}")


def _by_kind(names: dict[int, str], before: dict[int, float], after: dict[int, float],
             per: int) -> dict[str, float]:
    """Milliseconds of CPU each kind of thread used, per ``per`` requests."""
    kinds: dict[str, float] = {}
    for tid, ms in after.items():
        kind = re.sub(r"-\d+$", "-N", names.get(tid, f"thread {tid}"))
        kinds[kind] = kinds.get(kind, 0.0) + (ms - before.get(tid, 0.0)) / per
    return kinds


def _wrk(url: str, seconds: float, work: Path) -> int:
    """Requests ``wrk`` made in ``seconds`` (16 connections), each a POST of ib.BODY."""
    script = work / "post.lua"
    script.write_text('wrk.method = "POST"\n'
                      f"wrk.body = {json.dumps(ib.BODY.decode())}\n"
                      'wrk.headers["Content-Type"] = "application/json"\n')
    out = subprocess.run(["wrk", "-t2", f"-c{ib.CLIENTS}", f"-d{seconds:g}s", "-s", str(script),
                          url], capture_output=True, text=True, check=True).stdout
    found = re.search(r"(\d+) requests in", out)
    if found is None:
        raise RuntimeError(f"wrk printed no count: {out}")
    return int(found.group(1))


def _python_clients(port: int, path: str, seconds: float) -> int:
    """Requests 16 ``http.client`` threads made in ``seconds``."""
    stop = time.monotonic() + seconds
    counts = [0] * ib.CLIENTS

    def client(n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while time.monotonic() < stop:
                conn.request("POST", path, ib.BODY, {"Content-Type": "application/json"})
                conn.getresponse().read()
                counts[n] += 1
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(ib.CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts)


def measure_http(seconds: float, path: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="encore-inbound-cpu-"))
    port = ib.free_port()
    client = "wrk" if shutil.which("wrk") else "16 http.client threads"
    url = f"http://127.0.0.1:{port}{path}"
    try:
        production = ib._http_production(work, port)
        h.fresh_store(h.sqlite_url(work, "inbound-http.db")).dispose()
        with h.DaemonProcess(production, work, "inbound-cpu") as daemon:
            h.wait_started(daemon)
            ib._wait_listening(f"http://127.0.0.1:{port}/", status=404)
            load = ((lambda s: _wrk(url, s, work)) if client == "wrk"
                    else (lambda s: _python_clients(port, path, s)))
            load(2)  # warm: connections, statement caches
            names = thread_names(daemon.pid)
            before = thread_cpu_ms(daemon.pid)
            t0 = time.perf_counter()
            requests = load(seconds)
            elapsed = time.perf_counter() - t0
            after = thread_cpu_ms(daemon.pid)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kinds = _by_kind(names, before, after, requests)
    print(f"POST {path} from {client}: {requests:,} requests, {requests / elapsed:,.0f}/s; "
          "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{sum(kinds.values()) * 1000:8.1f} µs of the daemon's CPU per request, of which:")
    for kind, ms in sorted(kinds.items(), key=lambda kv: -kv[1]):
        if ms >= 0.0005:
            print(f"{ms * 1000:8.1f}  {kind}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="SOAP calls measured")
    parser.add_argument("--http", action="store_true",
                        help="the async HTTP route under 16 clients instead")
    parser.add_argument("--seconds", type=float, default=8.0,
                        help="--http: seconds of load measured")
    parser.add_argument("--path", default="/orders",
                        help="--http: the path posted to (/orders is the route)")
    args = parser.parse_args()
    if args.http:
        measure_http(args.seconds, args.path)
    else:
        measure(args.calls)


if __name__ == "__main__":
    main()
