"""Hostile XML against the daemon (issue 36, docs/security.md "XML limits"), ``encore run`` in a
subprocess on SQLite.

xml_attr_stall_ms: while envelopes of 60,000 attributes on one element (650 KB, under
``max_body_bytes``) are posted one after the other to an inbound SoapService for
:data:`ATTACK` seconds (at least one envelope), this process
sends a message every :data:`TICK` seconds to another item of the same daemon (a no-op
operation); the figure is the longest delivery delay of those messages — the time from
their commit to their attempt's start, by the database's timestamps — sent during the
attack. Without the XML limits, zeep held the interpreter 15 s or more per envelope, and
every thread of the daemon with it. Beside it: the same delay before the attack (what the
daemon's polling costs alone) and the slowest answer to a hostile envelope.
"""
from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

import requests

from bench import harness as h
from bench.inbound import _wait_listening, free_port
from bench.report import Outcome, table
from engine.client import send_message
from engine.store.sql import SqlStore

ROOT = Path(__file__).resolve().parents[1]
WSDL = ROOT / "docs" / "examples" / "soap-passthrough" / "echo.wsdl"
ATTRIBUTES = 60_000  # attributes on the hostile element
ATTACK = {True: 2.0, False: 10.0}  # seconds of hostile envelopes, one after the other, by --quick
TICK = 0.02  # seconds between two messages to the other item
QUIET = 1.0  # seconds of messages before the attack (the baseline) and after it
POLL = 0.01  # seconds: the daemon's poll interval (the sender is another process)


def _production(work: Path, port: int) -> Path:
    path = work / "hostile-xml.toml"
    path.write_text(f'''
[production]
name = "BenchHostileXml"
database = "{h.sqlite_url(work, 'hostile-xml.db')}"
poll_interval = {POLL}
[inbound]
port = {port}
[[items]]
name = "EchoSoap"
class = "engine.inbound:SoapService"
[items.settings]
wsdl = "{WSDL}"
path = "/soap/echo"
target = "Ticker"
[[items]]
name = "Ticker"
class = "bench.ops:NoopOperation"
''')
    return path


def _envelope() -> bytes:
    attributes = " ".join(f'a{i}="v"' for i in range(ATTRIBUTES))
    return (f'<e:Envelope xmlns:e="http://schemas.xmlsoap.org/soap/envelope/" '
            f'xmlns:x="urn:encore:echo"><e:Body><x:echo {attributes}><x:text>hi</x:text>'
            "</x:echo></e:Body></e:Envelope>").encode()


class _Ticker(threading.Thread):
    """Sends a message to Ticker every TICK seconds until stopped; (id, monotonic) of each."""

    def __init__(self, store: SqlStore, production_file: Path) -> None:
        super().__init__(name="ticker", daemon=True)
        self.store = store
        self.production = h.load(production_file.read_text())
        self.sent: list[tuple[int, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(TICK):
            mid = send_message(self.store, self.production, "Ticker", {"tick": len(self.sent)})
            self.sent.append((mid, time.monotonic()))


def _delays_ms(store: SqlStore, ids: list[int]) -> list[float]:
    """Each message's delay from its commit to its first attempt's start, in ms."""
    delays = []
    for mid in ids:
        row = store.get_message(mid)
        attempts = store.attempts(mid)
        if row is not None and attempts:
            delays.append((attempts[0].started_at - row.time_created).total_seconds() * 1000)
    return delays


def hostile_xml(work: Path, *, quick: bool) -> Outcome:
    out = Outcome()
    port = free_port()
    path = _production(work, port)
    store = h.fresh_store(h.sqlite_url(work, "hostile-xml.db"))
    envelope, answers = _envelope(), []
    try:
        with h.DaemonProcess(path, work, "hostile-xml") as daemon:
            h.wait_started(daemon)
            url = f"http://127.0.0.1:{port}/soap/echo"
            _wait_listening(url + "?wsdl")
            ticker = _Ticker(store, path)
            ticker.start()
            time.sleep(QUIET)
            began = time.monotonic()
            while not answers or time.monotonic() - began < ATTACK[quick]:
                t0 = time.monotonic()
                reply = requests.post(url, data=envelope, timeout=600,
                                      headers={"Content-Type": "text/xml; charset=utf-8"})
                answers.append((time.monotonic() - t0, reply.status_code))
            ended = time.monotonic()
            time.sleep(QUIET)
            ticker.stop.set()
            ticker.join()
            h.wait_finished(store, "Ticker", len(ticker.sent), timeout=60)
        before = [m for m, at in ticker.sent if at < began]
        during = [m for m, at in ticker.sent if began <= at <= ended]
        quiet, attacked = _delays_ms(store, before), _delays_ms(store, during)
    finally:
        store.dispose()
    statuses = sorted({status for _, status in answers})
    out.key("xml_attr_stall_ms", f"longest delivery delay of another item while envelopes "
            f"of {ATTRIBUTES} attributes are posted ({len(answers)} envelopes)",
            max(attacked) if attacked else None, "ms",
            f"n={len(attacked)} messages, one every {TICK * 1000:g} ms; p50 "
            f"{statistics.median(attacked):.1f} ms" if attacked else "no message sent")
    out.info("  the same delay before the attack (polling alone)",
             max(quiet) if quiet else None, "ms", f"n={len(quiet)}, poll_interval {POLL:g} s")
    out.info("  slowest answer to a hostile envelope", max(t for t, _ in answers) * 1000, "ms",
             f"HTTP {', '.join(map(str, statuses))} (500: a Client fault)")
    return out


def main() -> None:
    """``python -m bench.hostile_xml [--quick]``: the figure, with the load average."""
    with h.workdir() as work:
        outcome = hostile_xml(work, quick="--quick" in sys.argv)
    print(table(outcome.rows, outcome.values))
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
