"""The daemon's log tells the truth about time (issue 37): each event's line is printed when
the event happens, with its ``event_log.time_logged``; a burst of one item's failures is held
back and summarised by a later line that says how many, since when and until when; another
item's event in the middle of the burst is printed at once. A real daemon, a real loopback
server, two items."""
from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.servers import HttpTestServer, respond
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

BURST = 6  # messages of Orders that fail at once
LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) engine\.store\.eventlog: "
                  r"(.*)$")
SUMMARY = re.compile(r"^(\d+) more like this held back since (\S+ \S+) \(the last at "
                     r"(\S+ \S+)\): (.*)$")
FINAL = ("Completed", "Error", "Suspended")


def item(name: str, url: str) -> str:
    return (f'\n[[items]]\nname = "{name}"\nclass = "operations.http:HttpOperation"\n'
            f'[items.settings]\nurl = "{url}"\nfailure_timeout = 0\n')


def send(tmp_path: Path, target: str) -> int:
    body = json.dumps({"method": "POST", "path": "/fail", "body": target})
    return int(encore("send", target, "--body", body, cwd=tmp_path).stdout)


def shown(t: datetime) -> str:
    """A stored UTC time as the daemon's log prints it (TZ=UTC: asctime, to the ms)."""
    return t.strftime("%Y-%m-%d %H:%M:%S") + f",{t.microsecond // 1000:03d}"


def test_a_burst_on_two_items_prints_each_event_at_its_time_and_summarises_the_rest(
        tmp_path: Path) -> None:
    with HttpTestServer({"/fail": respond(500, "down")}) as server:
        url = f"sqlite:///{tmp_path / 'e.db'}"
        (tmp_path / "production.toml").write_text(
            f'[production]\nname = "T"\ndatabase = "{url}"\npoll_interval = 0.05\n'
            + item("Orders", server.url) + item("Stock", server.url))
        encore("db", "upgrade", cwd=tmp_path)
        store = SqlStore(url)
        orders = [send(tmp_path, "Orders") for _ in range(BURST)]
        with RunningDaemon(tmp_path, env={"TZ": "UTC"}) as daemon:
            wait_until(lambda: all(store.get_message(m).status in FINAL for m in orders), 30,
                       "the burst to fail")
            stock = send(tmp_path, "Stock")  # while Orders' repeats are held back
            wait_until(lambda: store.get_message(stock).status in FINAL, 30,
                       "Stock's message to fail")
            assert daemon.terminate() == 0  # the counts still open are printed as it exits
        output = daemon.output
    events = queries.events(store, queries.EventFilter(type="Error"))
    store.dispose()
    logged = {(e["config_name"], f"message {e['message_id']}: {e['text']}"): e["time_logged"]
              for e in events}
    lines = [m.groups() for m in map(LINE.match, output.splitlines()) if m]
    printed, summaries = [], []
    for when, _level, text in lines:
        found = SUMMARY.match(text)
        if found:
            summaries.append(found.groups())
            continue
        name, said = re.match(r"^\[([\w-]+)\] (.*)$", text).groups()  # type: ignore[union-attr]
        if name == "-":  # the production's life (the daemon's start and stop): no item's
            continue
        assert (name, said) in logged, f"a line for no event: {text}"
        # printed with its event's time, never another's
        assert when == shown(logged[name, said]), text
        printed.append((name, said))
    # Orders: its first message's two events at once, the other messages' held back
    first = f"message {orders[0]}: "
    assert sorted(s for n, s in printed if n == "Orders") == sorted(
        s for n, s in logged if n == "Orders" and s.startswith(first))
    # Stock's events, in the middle of Orders' minute, are printed at once, both
    assert sorted(s for n, s in printed if n == "Stock") == sorted(
        s for n, s in logged if n == "Stock")
    # each of Orders' two kinds (first failure, give-up) is one summary naming what it held
    # back: how many, since the first held event's time, until the last one's
    assert len(summaries) == 2
    for count, since, last_at, last in summaries:
        name, said = re.match(r"^\[(\w+)\] (.*)$", last).groups()  # type: ignore[union-attr]
        assert name == "Orders" and int(count) == BURST - 1
        kind = said.split(": ", 1)[1][:10]  # "attempt 1 " or "giving up:"
        held = sorted((t, s) for (n, s), t in logged.items()
                      if n == "Orders" and not s.startswith(first) and s.split(": ", 1)[1]
                      .startswith(kind))
        assert len(held) == BURST - 1
        assert since == shown(held[0][0]) and last_at == shown(held[-1][0])
        assert said == held[-1][1]
