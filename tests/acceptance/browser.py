"""What every browser test of the portal shares: Debian's chromium driven by Playwright, a
free loopback port, waiting for ``encore portal`` to answer, and a ``browser`` fixture
(import it into a test module: ``from tests.acceptance.browser import browser``).

Importing this module skips the importing test module when Playwright is missing, and when
chromium is missing outside CI (in CI, whose script installs chromium, that is an error)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.daemon import cli_env
from tests.waiting import answers, wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
START_TIMEOUT = 30  # seconds for `encore portal` to answer
UI_TIMEOUT = 15_000  # milliseconds Playwright waits for a page or an element

sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
    pytest.skip(f"browser tests need {CHROMIUM} (apt-get install chromium)",
                allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_portal(base: str, proc: subprocess.Popen[Any]) -> None:
    """Until the portal at ``base`` (run by ``proc``) answers its login page."""
    def started() -> bool:
        if proc.poll() is not None:
            raise AssertionError("encore portal exited at start")
        return answers(f"{base}/login")
    wait_until(started, START_TIMEOUT, "encore portal to answer")


@contextmanager
def portal_running(root: Path, base: str) -> Iterator[subprocess.Popen[Any]]:
    """``encore portal`` in ``root`` on ``base``'s port, its output in ``portal.log``, from
    when it answers until the block ends."""
    with (root / "portal.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "portal", "--port",
                                 base.rsplit(":", 1)[1]], cwd=root, env=cli_env(),
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_portal(base, proc)
            yield proc
        finally:
            proc.terminate()
            proc.wait(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium per test module."""
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
