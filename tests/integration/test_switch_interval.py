"""The interpreter's thread switch interval is the process's own: a program that starts a
daemon in-process keeps its own, and only ``encore run`` shortens it (docs/operating.md,
"Running as a service")."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.cli.commands import main
from engine.cli.run import GIL_SWITCH_INTERVAL
from engine.config.production import parse_production
from engine.runtime.daemon import Daemon
from engine.store.sql import SqlStore
from engine.testing import VirtualDaemon
from tests.unit.sample_ops import EchoOperation

OURS = 0.0042  # seconds: an interval of the program's own, unlike the daemon's


@pytest.fixture
def own_interval() -> Iterator[float]:
    """The switch interval set to :data:`OURS` for the test, restored after it."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(OURS)
    try:
        yield OURS
    finally:
        sys.setswitchinterval(before)


def test_a_virtual_daemon_leaves_the_switch_interval_alone(own_interval: float) -> None:
    with VirtualDaemon.for_item("Echo", EchoOperation, {}) as vd:
        vd.run_until(1.0)
        assert sys.getswitchinterval() == own_interval


def test_a_daemon_started_in_process_leaves_the_switch_interval_alone(
        own_interval: float, store: SqlStore, database_url: str) -> None:
    production = parse_production(
        f'[production]\nname = "P"\ndatabase = "{database_url}"\n'
        '[[items]]\nname = "Echo"\nclass = "tests.unit.sample_ops:EchoOperation"\n', env={})
    daemon = Daemon(production, store=store, env={})
    daemon.start()
    try:
        assert sys.getswitchinterval() == own_interval
    finally:
        assert daemon.stop()
    assert sys.getswitchinterval() == own_interval


def test_encore_run_shortens_the_switch_interval_for_its_daemon(
        own_interval: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []
    monkeypatch.setattr(Daemon, "run", lambda self: seen.append(sys.getswitchinterval()))
    (tmp_path / "production.toml").write_text(
        f'[production]\nname = "P"\ndatabase = "sqlite:///{tmp_path / "e.db"}"\n'
        '[[items]]\nname = "Echo"\nclass = "tests.unit.sample_ops:EchoOperation"\n')
    production = ["-p", str(tmp_path / "production.toml")]
    runner = CliRunner()
    assert runner.invoke(main, [*production, "db", "upgrade"]).exit_code == 0
    result = runner.invoke(main, [*production, "run"])
    assert result.exit_code == 0, result.output
    assert seen == [GIL_SWITCH_INTERVAL] and GIL_SWITCH_INTERVAL != own_interval
