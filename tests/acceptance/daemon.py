"""Running ``encore run`` as a subprocess for acceptance tests."""
from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ENCORE_DATABASE_URL", None)
    env.update(extra or {})
    return env


# True while a test marked ``cli_in_process`` runs (tests/conftest.py)
_in_process = False


@contextmanager
def commands_in_process() -> Iterator[None]:
    """Within the block, :func:`encore` runs its commands in this process."""
    global _in_process
    _in_process = True
    try:
        yield
    finally:
        _in_process = False


def encore(*args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None,
           stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``encore ARGS`` in ``cwd`` as a process of its own, or in this process in a test
    marked ``cli_in_process``; its exit status and output either way."""
    if _in_process:
        result = _encore_here(list(args), cwd, env, stdin)
    else:
        result = subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=cwd,
                                env=cli_env(env), capture_output=True, text=True, timeout=60,
                                input=stdin if stdin is not None else "")
    if check and result.returncode != 0:
        raise AssertionError(f"encore {' '.join(args)} failed:\n{result.stderr}")
    return result


class _ToStderr(logging.StreamHandler):
    """Writes each record to the ``sys.stderr`` of the moment: the runner's, in a command."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _encore_here(args: list[str], cwd: Path, env: dict[str, str] | None,
                 stdin: str | None) -> subprocess.CompletedProcess[str]:
    """The command through click's test runner: the environment :func:`cli_env` gives a
    process, ``cwd`` as the working directory, log records on stderr as ``encore`` writes
    them (its ``logging.basicConfig`` does nothing here, where pytest's handlers are set),
    and an uncaught exception's traceback on stderr with exit status 1. The stores the
    command opened are collected with it, their connections closed, as at a process's
    exit."""
    from click.testing import CliRunner

    from engine.cli.commands import main

    root, handler = logging.getLogger(), _ToStderr()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if {"-v", "--verbose"} & set(args) else logging.INFO)
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        ran = CliRunner().invoke(main, args, input=stdin if stdin is not None else "",
                                 env={"ENCORE_DATABASE_URL": None, **(env or {})},
                                 prog_name="python -m engine.cli")
    finally:
        os.chdir(previous)
        root.removeHandler(handler)
        root.setLevel(level)
        gc.collect()
    stderr = ran.stderr
    if ran.exception is not None and not isinstance(ran.exception, SystemExit):
        stderr += "".join(traceback.format_exception(ran.exception))
    return subprocess.CompletedProcess(["encore", *args], ran.exit_code, ran.stdout, stderr)


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
