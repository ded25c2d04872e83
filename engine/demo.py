"""``encore demo``: the seed scenario, scaled ÷10, live against a loopback SOAP service.

ResponseTimeout 0.7 s, RetryInterval 1 s, FailureTimeout 3 s; the service answers "slow"
after 0.8 s and anything else at once. The fast message completes; the slow one is sent four
times, about 1 s apart, and gives up about 3.7 s after its first attempt — the field report's
timeline, a tenth of the size. Everything lands in the embedded SQLite database.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any

import click

from engine.client import TERMINAL, send_message
from engine.daemon import Daemon
from engine.demo_server import DemoSoapServer
from engine.production import parse_production
from engine.report import table
from engine.store import queries
from engine.store.database import DEFAULT_DATABASE_URL
from engine.store.sql import SqlStore
from engine.trace import trace_lines

SLOW_REPLY = 0.8  # seconds: the seed's 8 s, ÷10
PRODUCTION = """
[production]
name = "Demo"
poll_interval = 0.05

[[items]]
name = "Seed"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "{wsdl}"
response_timeout = 0.7
retry_interval = 1.0
failure_timeout = 3.0
"""
SQL_HINTS = """\
Look at the tables yourself ({url}):
  SELECT id, status, attempts, retry_needed, error_text FROM message_header ORDER BY id;
  SELECT message_id, attempt, started_at, ended_at, outcome FROM message_attempt ORDER BY id;
  SELECT time_logged, type, config_name, message_id, text FROM event_log ORDER BY id;"""


class _Narrator:
    """Prints what happens, with seconds since the demo started."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.seen: set[tuple[str, int]] = set()

    def say(self, text: str) -> None:
        click.echo(f"{time.monotonic() - self.t0:6.2f}s  {text}")

    def server_event(self, kind: str, text: str) -> None:
        self.say(f"service: {kind} request {text!r}"
                 + (" (too late: the caller stopped waiting)" if kind == "discarded" else ""))

    def follow(self, store: SqlStore, ids: list[int]) -> None:
        for mid in ids:
            for a in store.attempts(mid):
                if ("start", a.id) not in self.seen:
                    self.seen.add(("start", a.id))
                    self.say(f"message {mid}: attempt {a.attempt} sent")
                if a.ended_at is not None and ("end", a.id) not in self.seen:
                    self.seen.add(("end", a.id))
                    self.say(f"message {mid}: attempt {a.attempt} {a.outcome}")
        for e in queries.events(store, queries.EventFilter(item="Seed")):
            if ("event", e["id"]) not in self.seen and e["message_id"] in ids:
                self.seen.add(("event", e["id"]))
                self.say(f"event log: {e['type']}: {e['text']}")


@click.command()
@click.option("--database", default=None,
              help="SQLAlchemy URL (default: $ENCORE_DATABASE_URL, else sqlite:///encore.db)")
def demo(database: str | None) -> None:
    """Play the seed scenario (÷10) live against a loopback SOAP service."""
    url = database or os.environ.get("ENCORE_DATABASE_URL") or DEFAULT_DATABASE_URL
    logging.disable(logging.CRITICAL)  # the narrator speaks instead
    narrator = _Narrator()
    with DemoSoapServer(lambda text: SLOW_REPLY if text == "slow" else 0.0,
                        narrator.server_event) as server:
        production = parse_production(PRODUCTION.format(wsdl=server.url + "?wsdl"),
                                      env={"ENCORE_DATABASE_URL": url})
        store = SqlStore(url)
        store.upgrade()
        narrator.say(f"SOAP service on {server.url}; production 'Demo' on {url}")
        narrator.say("settings: response_timeout 0.7 s, retry_interval 1 s, failure_timeout 3 s")
        daemon = Daemon(production, store=store, env={})
        daemon.start()
        ids = [send_message(store, production, "Seed",
                            {"operation": "GetResponse", "args": {"text": text}}, source="demo")
               for text in ("fast", "slow")]
        narrator.say(f"sent message {ids[0]} ('fast') and message {ids[1]} ('slow', answered "
                     f"after {SLOW_REPLY} s)")
        _run_until_done(store, ids, narrator)
        time.sleep(SLOW_REPLY)  # let the last late answer show up
        daemon.stop()
    _summary(store, ids, url)
    store.dispose()


def _run_until_done(store: SqlStore, ids: list[int], narrator: _Narrator,
                    limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        narrator.follow(store, ids)
        rows = [store.get_message(i) for i in ids]
        if all(r is not None and r.status in TERMINAL for r in rows):
            narrator.follow(store, ids)
            return
        time.sleep(0.02)
    raise click.ClickException(f"the demo did not finish within {limit:g} s")


def _summary(store: SqlStore, ids: list[int], url: str) -> None:
    click.echo("\nMessages:")
    rows: list[Any] = []
    for mid in ids:
        r = store.get_message(mid)
        assert r is not None
        rows.append((r.id, r.status, r.attempts, r.retry_needed, r.error_text))
    click.echo(table(("id", "status", "attempts", "retry", "error"), rows))
    click.echo("\nEvent log:")
    events = [e for e in queries.events(store, queries.EventFilter(item="Seed"))
              if e["message_id"] in ids]
    click.echo(table(("id", "time (UTC)", "type", "message", "text"),
                     [(e["id"], e["time_logged"], e["type"], e["message_id"], e["text"])
                      for e in events]))
    click.echo(f"\nTrace of message {ids[1]} (encore trace {ids[1]}):")
    for line in trace_lines(store, ids[1]):
        click.echo(line)
    click.echo("\n" + SQL_HINTS.format(url=url))
