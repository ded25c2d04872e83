"""The fault campaign's wall-clock steps: every daemon runs under libfaketime (Debian's
``faketime`` package), reading its offset from a file of its own, so that one daemon's
wall clock can be stepped ±10 minutes while its monotonic clock, the other daemons' and
the database server's clocks run on — an NTP step, a VM restored from a snapshot.

``FAKETIME_DONT_FAKE_MONOTONIC=1`` keeps ``CLOCK_MONOTONIC`` true; libfaketime 0.9.10 then
breaks ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)``, which ``time.sleep`` calls on
Python ≥ 3.11 (EINVAL; libfaketime issue 426), so the daemons also get a ``sitecustomize``
that sleeps through ``select`` instead: a repair of the fault injector, not of the engine.
The file is read again at most once a second (``FAKETIME_CACHE_DURATION``), so a step
takes effect within a second.
"""
from __future__ import annotations

import glob
from pathlib import Path

__all__ = ["STEP_SECONDS", "faketime_env", "faketime_library"]

STEP_SECONDS = 600.0  # how far a step moves a daemon's wall clock, either way
_LIBRARIES = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
              "/usr/local/lib/faketime/libfaketime.so.1")
_SITECUSTOMIZE = '''"""Written by bench/chaos_clock.py: time.sleep without clock_nanosleep
(libfaketime 0.9.10 fails it with EINVAL when the monotonic clock is not faked)."""
import select
import time


def _sleep(seconds, /):
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
'''


def faketime_library() -> str | None:
    """The path of libfaketime's preload library, or None when it is not installed."""
    for pattern in _LIBRARIES:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def faketime_env(library: str, offset_file: Path, site: Path) -> dict[str, str]:
    """The environment of a daemon whose wall clock follows ``offset_file`` (``+0`` until a
    step); ``site`` is a directory for the ``sitecustomize`` module, to put first on
    PYTHONPATH."""
    offset_file.write_text("+0\n")
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return {"LD_PRELOAD": library, "FAKETIME_TIMESTAMP_FILE": str(offset_file),
            "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
