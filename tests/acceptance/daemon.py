"""Running ``encore run`` as a subprocess for acceptance tests."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ENCORE_DATABASE_URL", None)
    env.update(extra or {})
    return env


def encore(*args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None,
           stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=cwd,
                            env=cli_env(env), capture_output=True, text=True, timeout=60,
                            input=stdin if stdin is not None else "")
    if check and result.returncode != 0:
        raise AssertionError(f"encore {' '.join(args)} failed:\n{result.stderr}")
    return result


class RunningDaemon:
    """``encore run`` in the background; stop it with SIGTERM or kill it."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log_path = cwd / f"daemon-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "engine.cli", *args, "run"],
                                     cwd=cwd, env=cli_env(env), stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.wait(10)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._log.close()
        return code

    @property
    def output(self) -> str:
        return self.log_path.read_text()

    def __enter__(self) -> RunningDaemon:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc.poll() is None:
            self.kill()
