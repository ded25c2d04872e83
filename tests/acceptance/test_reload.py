"""SIGHUP reloads the production file: changed items restart, others keep running, and a
broken file leaves the running production as it was."""
from __future__ import annotations

import json
import signal
from pathlib import Path

from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore, wait_until

HEAD = '[production]\nname = "Reload"\ndatabase = "{url}"\npoll_interval = 0.05\n'
ECHO = '\n[[items]]\nname = "{name}"\nclass = "tests.unit.sample_ops:EchoOperation"\n'


def send(tmp_path: Path, target: str) -> int:
    return int(encore("send", target, "--body", json.dumps({"text": "x"}), cwd=tmp_path).stdout)


def test_sighup_adds_items_and_survives_a_broken_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    path = tmp_path / "production.toml"
    path.write_text(HEAD.format(url=url) + ECHO.format(name="First"))
    encore("db", "upgrade", cwd=tmp_path)
    store = SqlStore(url)
    with RunningDaemon(tmp_path) as daemon:
        first = send(tmp_path, "First")
        wait_until(lambda: store.get_message(first).status == "Completed", 20, "First to work")
        path.write_text(HEAD.format(url=url) + ECHO.format(name="First")
                        + ECHO.format(name="Second"))
        second = send(tmp_path, "Second")
        daemon.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: store.get_message(second).status == "Completed", 20,
                   "the new item to work after the reload")
        path.write_text(HEAD.format(url=url) + ECHO.format(name="First") + "pool_size = 0\n")
        daemon.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload refused" in daemon.output, 20, "the refusal to be logged")
        again = store.enqueue(target="First", body_class="tests.unit.sample_ops:Ping",
                              body='{"text": "x"}')  # `encore send` refuses the broken file
        wait_until(lambda: store.get_message(again).status == "Completed", 20,
                   "the old production to keep working")
        assert daemon.terminate() == 0
    assert "setting 'pool_size'" in daemon.output
    store.dispose()
