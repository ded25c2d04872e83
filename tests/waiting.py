"""Waiting in a test for what another thread or process does: the suite's one poll loop.

A test that waits for a daemon's log line, a row's status, a server listening or a thread's
count polls for it here, with a bound far above the time it takes (the suite passes on a loaded
two-core machine), and fails saying what it waited for. The condition is looked at once more
after the bound, so a test whose poll was starved of the processor does not fail for that."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import requests

T = TypeVar("T")

EVERY = 0.05  # seconds between two looks: short beside any bound, light on a loaded machine


def wait_until(predicate: Callable[[], T], timeout: float, what: str, *,
               every: float = EVERY) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; fail the test
    (``AssertionError`` naming ``what``) when ``timeout`` seconds have passed without it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def answers(url: str) -> bool:
    """Whether a GET of ``url`` answers 200: false while nothing listens there yet, or while
    a server starting on a loaded machine is too slow to answer within a few seconds."""
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False
