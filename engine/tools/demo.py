"""``encore demo``: the Ensemble timeout scenario, scaled ÷10, live against a loopback SOAP
service.

The scenario is the field report on Ensemble's ResponseTimeout, RetryInterval and
FailureTimeout (docs/retries.md: 7 s, 10 s and 30 s against a service that answers after
8 s). Here: ResponseTimeout 0.7 s, RetryInterval 1 s, FailureTimeout 3 s; the service answers
"slow" after 0.8 s and anything else at once. The fast message completes; the slow one is
sent four times, about 1 s apart, and gives up about 3.7 s after its first attempt — the
report's timeline, a tenth of the size. Everything lands in the embedded SQLite database,
and the production the demo ran is left beside it as ``demo.toml``, so that ``encore -p
demo.toml status`` (``messages``, ``show``, ``log``, ``trace``) reads what it did.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import time
from pathlib import Path
from typing import Any

import click

from engine.cli.report import table
from engine.cli.trace import trace_lines
from engine.client import TERMINAL, send_message
from engine.config.production import absolute_sqlite_url, parse_production
from engine.runtime.daemon import Daemon
from engine.store import queries
from engine.store.database import DEFAULT_DATABASE_URL, sqlite_file
from engine.store.listings import TABLE_QUERIES
from engine.store.sql import SqlStore
from engine.store.url import parse_url, safe_url
from engine.tools.demo_server import DemoSoapServer

SLOW_REPLY = 0.8  # seconds: the report's 8 s, ÷10
ITEM = "DemoSoapService"  # the demo's one item: a SOAP operation calling the demo's service
PRODUCTION_FILE = "demo.toml"  # the production the demo leaves beside its database
MARK = "# Written by `encore demo`"  # the first line of a demo.toml the demo may rewrite
PRODUCTION = """
[production]
name = "Demo"
poll_interval = 0.05

[[items]]
name = "{item}"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "{wsdl}"
response_timeout = 0.7
retry_interval = 1.0
failure_timeout = 3.0
"""
FILE_HEADER = f"""\
{MARK}, each time it runs: the production it played — the Ensemble timeout
# scenario, a tenth of the size (response timeout 0.7 s, retry interval 1 s, failure timeout
# 3 s). The commands that read its database work with it: `encore -p demo.toml status`,
# `messages`, `show ID`, `log`, `trace ID`. Its SOAP service listened on a loopback port only
# while the demo ran, so `encore run` with this file would find no WSDL there.
"""


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
        for e in queries.events(store, queries.EventFilter(item=ITEM)):
            if ("event", e["id"]) not in self.seen and e["message_id"] in ids:
                self.seen.add(("event", e["id"]))
                self.say(f"event log: {e['type']}: {e['text']}")


@click.command()
@click.option("--database", default=None,
              help="SQLAlchemy URL (default: $ENCORE_DATABASE_URL, else sqlite:///encore.db)")
def demo(database: str | None) -> None:
    """Play the Ensemble timeout scenario (÷10) live against a loopback SOAP service, and
    leave its production file, demo.toml, beside the database."""
    url = absolute_sqlite_url(database or os.environ.get("ENCORE_DATABASE_URL")
                              or DEFAULT_DATABASE_URL, Path.cwd())
    logging.disable(logging.CRITICAL)  # the narrator speaks instead
    narrator = _Narrator()
    with DemoSoapServer(lambda text: SLOW_REPLY if text == "slow" else 0.0,
                        narrator.server_event) as server:
        production_text = PRODUCTION.format(item=ITEM, wsdl=server.url + "?wsdl")
        production = parse_production(production_text, env={"ENCORE_DATABASE_URL": url})
        store = SqlStore(url)
        store.upgrade()
        production_file = _leave_production_file(production_text, url)
        narrator.say(f"SOAP service on {server.url}; production 'Demo' on {url}")
        narrator.say("settings: response_timeout 0.7 s, retry_interval 1 s, failure_timeout 3 s")
        daemon = Daemon(production, store=store, env={})
        daemon.start()
        ids = [send_message(store, production, ITEM,
                            {"operation": "GetResponse", "args": {"text": text}}, source="demo")
               for text in ("fast", "slow")]
        narrator.say(f"sent message {ids[0]} ('fast') and message {ids[1]} ('slow', answered "
                     f"after {SLOW_REPLY} s)")
        _run_until_done(store, ids, narrator)
        time.sleep(SLOW_REPLY)  # let the last late answer show up
        daemon.stop()
    _summary(store, ids, url, production_file)
    if production_file is not None and parse_url(url).password:
        click.echo("(demo.toml leaves the database's password out: set ENCORE_DATABASE_URL "
                   "to its URL before these commands)")
    store.dispose()


def _leave_production_file(text: str, url: str) -> Path | None:
    """Write the demo's production to demo.toml beside the database (an SQLite file's
    directory; the current one for another database), unless a demo.toml the demo did not
    write is there. Returns its path, or None when it was left alone."""
    file = sqlite_file(url)
    directory = Path(file).parent if file else Path.cwd()
    path = directory / PRODUCTION_FILE
    if path.exists() and not path.read_text(encoding="utf-8").startswith(MARK):
        click.echo(f"(left {path} as it is: `encore demo` did not write it)")
        return None
    path.write_text(FILE_HEADER + _with_database(text, url), encoding="utf-8")
    return path


def _with_database(text: str, url: str) -> str:
    """The production ``text`` with its ``database``: the file's name for an SQLite file
    (the file is beside it, and a relative path is read from the production file's
    directory); a URL holding a password is left to ENCORE_DATABASE_URL, not written."""
    parsed = parse_url(url)
    if sqlite_file(url) and not parsed.query:
        line = f"database = {json.dumps('sqlite:///' + Path(parsed.database or '').name)}"
    elif parsed.password:
        line = (f"# database: {parsed.render_as_string(hide_password=True)} (set "
                "ENCORE_DATABASE_URL: a password does not belong in a production file)")
    else:
        line = f"database = {json.dumps(url)}"
    return text.replace('name = "Demo"\n', f'name = "Demo"\n{line}\n', 1)


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


def _summary(store: SqlStore, ids: list[int], url: str, production_file: Path | None) -> None:
    click.echo("\nMessages:")
    rows: list[Any] = []
    for mid in ids:
        r = store.get_message(mid)
        assert r is not None
        rows.append((r.id, r.status, r.attempts, r.retry_needed, r.error_text))
    click.echo(table(("id", "status", "attempts", "retry", "error"), rows))
    click.echo("\nEvent log:")
    events = [e for e in queries.events(store, queries.EventFilter(item=ITEM))
              if e["message_id"] in ids]
    click.echo(table(("id", "time (UTC)", "type", "message", "text"),
                     [(e["id"], e["time_logged"], e["type"], e["message_id"], e["text"])
                      for e in events]))
    encore = _command_prefix(url, production_file)
    click.echo(f"\nTrace of message {ids[1]} ({encore} trace {ids[1]}):")
    for line in trace_lines(store, ids[1]):
        click.echo(line)
    click.echo(f"\nLook at the tables yourself ({url}):\n{TABLE_QUERIES}")
    click.echo("\n" + _next_steps(encore, ids, production_file))


def _command_prefix(url: str, production_file: Path | None) -> str:
    """``encore -p demo.toml`` (the path as short as it can be from here), or, when the demo
    left no production file, ``ENCORE_DATABASE_URL=… encore``."""
    if production_file is None:
        shown_url = safe_url(url)
        return f"ENCORE_DATABASE_URL={shlex.quote(shown_url)} encore"
    relative = os.path.relpath(production_file)
    shown = relative if not relative.startswith("..") else str(production_file)
    return f"encore -p {shlex.quote(shown)}"


def _next_steps(encore: str, ids: list[int], production_file: Path | None) -> str:
    """The commands to try next, on the messages the demo just made."""
    fast, slow = ids
    steps = [("status", "the item, its queue, its last error"),
             ("messages", f"the two requests ({fast}, {slow}) and the fast one's response"),
             (f"show {slow}", f"message {slow} whole: header, body, attempts, events"),
             (f"log --message {slow}", "its events: the first failure and the give-up"),
             (f"trace {slow}", "its attempts on a time line")]
    if production_file is None:  # status needs a production file
        steps = steps[1:]
        where = "Try next (on the demo's database):"
    else:
        where = f"The demo left its production file, {production_file}, beside the database. " \
                "Try next:"
    width = max(len(f"{encore} {command}") for command, _ in steps)
    return "\n".join([where, *(f"  {f'{encore} {command}':<{width}}  # {what}"
                               for command, what in steps)])
