"""The daemon's tick loop in real time: order and generous bounds only."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from engine import BusinessOperation, BusinessService
from engine.client import send_message
from engine.config.production import parse_production
from engine.runtime.daemon import Daemon
from engine.store.sql import SqlStore
from tests.waiting import wait_until

LEASE = 3.0  # seconds: a heartbeat every second
PATIENCE = 20.0  # seconds a test waits at most for what should take a few


class StuckService(BusinessService):
    """Blocks in on_process_input until ``release`` is set."""

    entered = threading.Event()
    release = threading.Event()

    def on_process_input(self) -> None:
        self.entered.set()
        self.release.wait(PATIENCE)


class StuckOperation(BusinessOperation):
    """Blocks in on_message until ``release`` is set."""

    entered = threading.Event()
    release = threading.Event()

    def on_message(self, request: Any) -> Any:
        self.entered.set()
        self.release.wait(PATIENCE)
        return {"done": True}


def daemon_for(tmp_path: Path, item: str) -> tuple[Daemon, SqlStore, list[float]]:
    url = f"sqlite:///{tmp_path / 'encore.db'}"
    store = SqlStore(url)
    store.upgrade()
    production = parse_production(
        f'[production]\nname = "Loop"\ndatabase = "{url}"\nlease_seconds = {LEASE}\n'
        f'poll_interval = 0.05\nshutdown_timeout = {PATIENCE}\n{item}', env={})
    daemon = Daemon(production, store=store, env={})
    beats: list[float] = []
    beat = daemon.membership.heartbeat

    def counted() -> None:
        beat()
        beats.append(time.monotonic())
    daemon.membership.heartbeat = counted  # type: ignore[method-assign]
    return daemon, store, beats


def test_the_heartbeat_beats_while_a_slow_service_runs(tmp_path: Path) -> None:
    StuckService.entered.clear()
    StuckService.release.clear()
    daemon, store, beats = daemon_for(tmp_path, (
        '[[items]]\nname = "Poller"\nclass = "tests.integration.test_daemon_loop:StuckService"\n'
        '[items.settings]\ncall_interval = 0.05\n'))
    daemon.start()
    try:
        assert StuckService.entered.wait(PATIENCE)
        before = len(beats)
        wait_until(lambda: len(beats) >= before + 2, PATIENCE,
                   "two heartbeats while the service runs")
        assert not StuckService.release.is_set()  # still stuck: the beats did not wait for it
    finally:
        StuckService.release.set()
        assert daemon.stop()
        store.dispose()


def test_a_stop_beats_the_heartbeat_until_the_workers_have_joined(tmp_path: Path) -> None:
    StuckOperation.entered.clear()
    StuckOperation.release.clear()
    daemon, store, beats = daemon_for(tmp_path, (
        '[[items]]\nname = "Work"\nclass = "tests.integration.test_daemon_loop:StuckOperation"\n'))
    daemon.start()
    try:
        mid = send_message(store, daemon.production, "Work", {})
        assert StuckOperation.entered.wait(PATIENCE)
        stopped: list[bool] = []
        stopping = threading.Thread(target=lambda: stopped.append(daemon.stop()))
        stopping.start()
        wait_until(lambda: daemon.stop_requested.is_set(), PATIENCE, "the stop")
        before = len(beats)
        wait_until(lambda: len(beats) >= before + 2, PATIENCE, "two heartbeats during the stop")
        assert stopping.is_alive()  # the stop still waits for the worker
        StuckOperation.release.set()
        stopping.join(PATIENCE)
        assert stopped == [True]
        assert store.get_message(mid).status == "Completed"
        count = len(beats)
        time.sleep(LEASE / 3 * 2)
        assert len(beats) == count  # no beat after the stop
    finally:
        StuckOperation.release.set()
        store.dispose()
