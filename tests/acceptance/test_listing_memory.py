"""``encore messages --all`` and ``encore log --all`` read their rows a chunk at a time
(issue 36: every row was held at once, 327 MB on SQLite and 400 MB on PostgreSQL for
100,000 messages), on SQLite and PostgreSQL: the peak memory of the command, as the
kernel counts it, stays far below the size of what it prints."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.store.sql import SqlStore
from tests.acceptance.daemon import cli_env

COUNT = 12_000  # messages listed
BODY_BYTES = 10_000  # each message's body: 120 MB of bodies in all
BOUND_MB = 110  # a generous bound: the interpreter and its imports take ~60 MB
# Runs the command line in this process and tells its peak resident size on stderr's last line:
# VmHWM, the high-water mark of this program's own memory (getrusage's ru_maxrss would not do:
# Linux keeps it across exec, so it may be the forking test worker's).
PEAK = ("import runpy, sys\n"
        "try:\n    runpy.run_module('engine.cli', run_name='__main__')\n"
        "finally:\n"
        "    sys.stdout.flush()\n"
        "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "    print(int(hwm.split()[1]) // 1024, file=sys.stderr)\n")


def _fill(url: str) -> None:
    store = SqlStore(url)
    store.upgrade()
    body = json.dumps({"pad": "x" * BODY_BYTES})
    for _ in range(COUNT // 1_000):
        store.enqueue_many(target="Orders", bodies=[(None, body)] * 1_000, source="test")
    for n in range(2_000):
        store.events.write("Info", f"event {n} " + "y" * 5_000, config_name="Orders")
    store.dispose()


def _run(tmp_path: Path, url: str, *args: str) -> tuple[int, int]:
    """(lines printed, peak MB) of ``encore args`` on ``url``; its output goes to a file."""
    production = tmp_path / "production.toml"
    production.write_text(f'[production]\nname = "Big"\ndatabase = "{url}"\n\n'
                          '[[items]]\nname = "Orders"\n'
                          'class = "tests.unit.sample_ops:EchoOperation"\n')
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        done = subprocess.run([sys.executable, "-c", PEAK, "-p", str(production), *args],
                              cwd=tmp_path, env=cli_env(), stdout=sink,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with out.open() as printed:
        lines = sum(1 for _ in printed)
    return lines, int(done.stderr.strip().splitlines()[-1])


def test_messages_all_and_log_all_stream_in_bounded_memory(
        database_url: str, tmp_path: Path) -> None:
    _fill(database_url)
    lines, peak_mb = _run(tmp_path, database_url, "messages", "--all", "--json")
    assert lines == COUNT
    assert peak_mb < BOUND_MB, f"{peak_mb} MB to list {COUNT * BODY_BYTES // 2**20} MB"
    lines, peak_mb = _run(tmp_path, database_url, "messages", "--all")
    assert lines == COUNT + 1 and peak_mb < BOUND_MB, peak_mb  # a table: headers and rows
    lines, peak_mb = _run(tmp_path, database_url, "log", "--all", "--json")
    assert lines == 2_000 and peak_mb < BOUND_MB, peak_mb
