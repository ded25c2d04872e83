"""An item's schedule window starts and stops it: outside the window its messages wait."""
from __future__ import annotations

from engine.client import send_message, wait_for
from engine.config.production import parse_production
from engine.runtime.daemon import Daemon
from engine.store.sql import SqlStore

PRODUCTION = """
[production]
poll_interval = 0.05
[[items]]
name = "Closed"
class = "tests.unit.sample_ops:EchoOperation"
[items.settings]
schedule = { start = "0 0 1 1 *", stop = "1 0 1 1 *" }
[[items]]
name = "Open"
class = "tests.unit.sample_ops:EchoOperation"
[items.settings]
schedule = { start = "* * * * *", stop = "0 0 1 1 *" }
"""


def test_only_items_inside_their_window_take_messages(store: SqlStore) -> None:
    # "Closed" opens on 1 January at 00:00 and closes a minute later: closed now (unless the
    # test runs in that minute, when it stops at 00:01 instead and is closed just the same)
    production = parse_production(PRODUCTION, env={})
    daemon = Daemon(production, store=store, env={})
    daemon.start()
    try:
        closed = send_message(store, production, "Closed", {"text": "wait"})
        opened = send_message(store, production, "Open", {"text": "go"})
        assert wait_for(store, opened, timeout=10) is not None
        assert wait_for(store, closed, timeout=1.0) is None
        assert store.get_message(closed).status == "Queued"
    finally:
        daemon.stop()
