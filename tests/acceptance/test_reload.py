"""SIGHUP reloads the production file: changed items restart, others keep running, and a
broken file leaves the running production as it was."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from engine.store import queries
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

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


def enqueue(store: SqlStore, target: str) -> int:
    """Put a message straight into ``target``'s queue (no `encore send`: the file on disk may
    be the one the daemon refused)."""
    return store.enqueue(target=target, body_class="tests.unit.sample_ops:Ping",
                         body='{"text": "x"}')


def errors_of(store: SqlStore, item: str) -> list[str]:
    return [e["text"] for e in queries.events(store, queries.EventFilter(type="Error",
                                                                         item=item))]


UNSTARTABLE = [
    # an HTTP item without url: its adapter cannot be made
    ("NoUrl", '\n[[items]]\nname = "NoUrl"\nclass = "operations.http:HttpOperation"\n',
     "setting 'url'"),
    # credentials that name nothing set: the adapter cannot start
    ("NoCreds", '\n[[items]]\nname = "NoCreds"\nclass = "operations.http:HttpOperation"\n'
                '[items.settings]\nurl = "http://127.0.0.1:9/"\ncredentials = "nobody"\n',
     "credentials 'nobody' not found"),
    # a class whose on_init raises
    ("Locked", '\n[[items]]\nname = "Locked"\nclass = "tests.unit.sample_ops:BrokenInitOperation"\n',
     "RuntimeError: the ledger file is locked"),
    # an item already running, changed to a class that cannot start: the old one goes on
    ("First", '', "RuntimeError: the ledger file is locked"),
]


def test_a_reload_with_an_item_that_cannot_start_is_refused_and_changes_nothing(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    path = tmp_path / "production.toml"
    running = HEAD.format(url=url) + ECHO.format(name="First")
    path.write_text(running)
    encore("db", "upgrade", cwd=tmp_path)
    store = SqlStore(url)
    with RunningDaemon(tmp_path) as daemon:
        ready = enqueue(store, "First")  # and its SIGHUP handler installed
        wait_until(lambda: store.get_message(ready).status == "Completed", 20, "First to work")
        for name, item, reason in UNSTARTABLE:
            text = running + item if item else running.replace("EchoOperation",
                                                               "BrokenInitOperation")
            path.write_text(text)
            daemon.proc.send_signal(signal.SIGHUP)
            (error,) = wait_until(lambda name=name: errors_of(store, name), 20, f"{name} refused")
            assert error.startswith("reload refused") and reason in error, error
            assert f"item {name!r}" in error
            mid = enqueue(store, "First")
            wait_until(lambda mid=mid: store.get_message(mid).status == "Completed", 20,
                       "the running production to go on delivering")
            assert daemon.proc.poll() is None
        path.write_text(running + ECHO.format(name="Second"))  # now a change that can start
        daemon.proc.send_signal(signal.SIGHUP)
        second, first = enqueue(store, "Second"), enqueue(store, "First")
        wait_until(lambda: store.get_message(second).status == "Completed", 20,
                   "the good change to be applied")
        wait_until(lambda: store.get_message(first).status == "Completed", 20,
                   "the unchanged item to keep working")
        assert daemon.terminate() == 0
    assert "RuntimeError: cannot join thread" not in daemon.output
    assert [len(errors_of(store, name)) for name, _, _ in UNSTARTABLE] == [1, 1, 1, 1]
    store.dispose()
