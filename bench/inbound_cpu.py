"""Where one inbound SOAP call's CPU goes, thread by thread: ``python bench/inbound_cpu.py
[--calls N]``.

bench/inbound.py's SOAP production (``SoapService`` → ``Router`` → ``SoapOperation`` → a
loopback spyne echo) in an ``encore run`` subprocess on SQLite; a zeep client generated from
the served WSDL makes ``N`` calls (after 30 to warm up). Each daemon thread's run time is read
from ``/proc/PID/task/TID/schedstat`` (nanoseconds) before and after, and its name from
``py-spy dump`` (the bench extra); threads of one kind (``Echo-1`` … ``Echo-4``) are summed.
Printed in milliseconds of CPU per call, with the calls' p50 and the load average.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
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
    kinds: dict[str, float] = {}
    for tid, ms in after.items():
        kind = re.sub(r"-\d+$", "-N", names.get(tid, f"thread {tid}"))
        kinds[kind] = kinds.get(kind, 0.0) + (ms - before.get(tid, 0.0)) / calls
    print(f"{calls} calls, p50 {statistics.median(times):.2f} ms; load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{sum(kinds.values()):8.3f} ms of the daemon's CPU per call, of which:")
    for kind, ms in sorted(kinds.items(), key=lambda kv: -kv[1]):
        if ms >= 0.005:
            print(f"{ms:8.3f}  {kind}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls measured")
    measure(parser.parse_args().calls)


if __name__ == "__main__":
    main()
