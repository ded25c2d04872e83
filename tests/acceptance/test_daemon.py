"""``encore run`` as a real daemon process, driven with ``encore send`` and read from SQL."""
from __future__ import annotations

import json
from pathlib import Path

from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore, wait_until

PRODUCTION = """
[production]
name = "DaemonTest"
database = "{url}"
poll_interval = 0.05

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"
pool_size = 2
"""


def test_the_daemon_delivers_sent_messages_and_stops_gracefully(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    (tmp_path / "production.toml").write_text(PRODUCTION.format(url=url))
    encore("db", "upgrade", cwd=tmp_path)
    ids = [int(encore("send", "Echo", "--body", json.dumps({"text": f"m{i}"}),
                      cwd=tmp_path).stdout) for i in range(3)]
    store = SqlStore(url)
    with RunningDaemon(tmp_path) as daemon:
        wait_until(lambda: all(store.get_message(i).status == "Completed" for i in ids), 30,
                   "the messages to complete")
        reply = encore("send", "Echo", "--body", '{"text": "sync"}', "--wait", "20",
                       cwd=tmp_path).stdout.splitlines()
        assert json.loads(reply[1]) == {"text": "SYNC", "count": 1}
        status = encore("status", cwd=tmp_path).stdout
        assert "DaemonTest" in status and "no daemon running" not in status
        assert daemon.terminate() == 0
    assert "stopped" in daemon.output
    for mid in ids:
        row = store.get_message(mid)
        response = store.get_message(row.corresponding_id)
        assert response.kind == "response" and response.corresponding_id == mid
        assert json.loads(response.body)["text"] == f"M{mid - ids[0]}"
        assert [a.outcome for a in store.attempts(mid)] == ["ok"]
    assert "no daemon running" in encore("status", cwd=tmp_path).stdout
    store.dispose()
