"""``encore run`` with this host's wall clock stepped by a file, the monotonic clock untouched
— an NTP step or a resumed VM — through libfaketime (Debian's ``faketime`` package)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.daemon import RunningDaemon, cli_env

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

# libfaketime 0.9.10 with the monotonic clock left alone fails Python 3.11's time.sleep
# (clock_nanosleep on the monotonic clock with an absolute time: EINVAL, libfaketime issue
# 426); waits on threading primitives work. So the daemon starts with time.sleep as such a
# wait, then runs the command line as `python -m engine.cli` would.
LAUNCHER = ("import threading, time\n"
            "time.sleep = lambda seconds: threading.Event().wait(max(seconds, 0)) and None\n"
            "import runpy\n"
            "runpy.run_module('engine.cli', run_name='__main__', alter_sys=True)\n")


class SteppedWallClock:
    """The wall clock of the processes started with :meth:`env`: ``step(seconds)`` sets it
    that far from the real one, at once, in every such process."""

    def __init__(self, path: Path) -> None:
        if not LIBFAKETIME.exists():  # an error in CI, whose script installs it
            missing = f"{LIBFAKETIME} is missing (apt-get install faketime)"
            pytest.fail(missing) if os.environ.get("CI") else pytest.skip(missing)
        self.path = path
        self.step(0)

    def step(self, seconds: int) -> None:
        self.path.write_text(f"{seconds:+d}\n")

    def env(self) -> dict[str, str]:
        return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(self.path),
                "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


class SteppedDaemon(RunningDaemon):
    """``encore run`` whose wall clock ``clock`` steps."""

    def __init__(self, cwd: Path, clock: SteppedWallClock, *args: str) -> None:
        self.log_path = cwd / f"stepped-daemon-{id(self)}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, *args, "run"], cwd=cwd,
                                     env=cli_env(clock.env()), stdout=self._log,
                                     stderr=subprocess.STDOUT)
