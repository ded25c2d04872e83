"""Rate-limited logging of repeated failures (docs/security.md, docs/server-limits.md).

:class:`RepeatFilter` lets the first record of a kind through per minute and logs one count line for
the rest, so a flood neither fills the disk nor starves the daemon. A kind is the logger and the
message template, or ``extra={"repeat_kind": ...}``; records below WARNING are never held.
:func:`limit_repeats` installs one shared filter and a thread that flushes the counts.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["REPEATING_LOGGERS", "SERVER_LOGGERS", "RepeatFilter", "limit_repeats", "repeat_filter"]

WINDOW = 60.0  # seconds: one line per kind and window
FLUSH_INTERVAL = 5.0

SERVER_LOGGERS: tuple[str, ...] = (
    "uvicorn", "uvicorn.error", "uvicorn.access", "asyncio",
    "engine.serving.limits", "engine.portal.app", "engine.portal.server",
)
REPEATING_LOGGERS: tuple[str, ...] = SERVER_LOGGERS + (
    "engine.runtime.daemon", "engine.delivery.dispatch", "engine.delivery.item",
    "engine.delivery.worker", "engine.delivery.attempt_runner", "engine.runtime.scheduler",
    "engine.runtime.cluster", "engine.runtime.alerts",
    "engine.observe.metrics", "engine.store.sql", "engine.store.eventlog", "engine.store.notify",
    "engine.store.doorbell",
)

_SUMMARY = "%d more like this held back since %s (the last at %s): %s"
_TIMES = logging.Formatter()


@dataclass(slots=True)
class _Run:
    """One kind's current window: its start, the count held back, the first and last records."""

    started: float
    held: int
    last: logging.LogRecord
    first_held: logging.LogRecord | None = None


class RepeatFilter(logging.Filter):
    """Let the first record of a kind through per ``window`` seconds; count the others."""

    def __init__(self, *, window: float = WINDOW, clock: Callable[[], float] = time.monotonic,
                 level: int = logging.WARNING) -> None:
        super().__init__()
        self.window = window
        self.level = level
        self._clock = clock
        self._runs: dict[tuple[str, int, str], _Run] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level or getattr(record, "repeat_summary", False):
            return True
        now = self._clock()
        key = (record.name, record.levelno, str(getattr(record, "repeat_kind", record.msg)))
        with self._lock:
            ended = self._take_ended(now)
            run = self._runs.get(key)
            if run is None:
                self._runs[key] = _Run(started=now, held=0, last=record)
            else:
                if not run.held:
                    run.first_held = record
                run.held += 1
                run.last = record
        self._emit(ended)
        return run is None

    def flush(self, *, everything: bool = False) -> int:
        """Log the count of every ended window; return how many lines."""
        with self._lock:
            ended = self._take_ended(self._clock(), everything=everything)
        self._emit(ended)
        return len(ended)

    def held(self) -> int:
        """Records held back in the current windows (for tests and metrics)."""
        with self._lock:
            return sum(run.held for run in self._runs.values())

    def _take_ended(self, now: float, *, everything: bool = False) -> list[_Run]:
        """Take the ended windows that held records back (``everything``: all)."""
        ended: list[_Run] = []
        for key, run in list(self._runs.items()):
            if not everything and now - run.started < self.window:
                continue
            if run.held:
                ended.append(run)
            if run.held and not everything:
                self._runs[key] = _Run(started=now, held=0, last=run.last)
            else:
                del self._runs[key]
        return ended

    @staticmethod
    def _emit(ended: Iterable[_Run]) -> None:
        """One line per ended window: how many, since when, and the last record with its time."""
        for run in ended:
            last, first = run.last, run.first_held or run.last
            summary = logging.LogRecord(
                last.name, last.levelno, last.pathname, last.lineno, _SUMMARY,
                (run.held, _TIMES.formatTime(first), _TIMES.formatTime(last),
                 last.getMessage()), None, func=last.funcName)
            summary.repeat_summary = True
            logging.getLogger(last.name).handle(summary)


_shared: RepeatFilter | None = None
_shared_lock = threading.Lock()


def repeat_filter() -> RepeatFilter:
    """The process's shared filter (created on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = RepeatFilter()
            threading.Thread(target=_flush_forever, args=(_shared,), daemon=True,
                             name="encore-log-repeats").start()
            atexit.register(_shared.flush, everything=True)  # before logging shuts down
        return _shared


def limit_repeats(names: Iterable[str] = REPEATING_LOGGERS) -> RepeatFilter:
    """Put the shared :class:`RepeatFilter` on the loggers ``names`` (idempotent)."""
    shared = repeat_filter()
    for name in names:
        logger = logging.getLogger(name)
        if shared not in logger.filters:
            logger.addFilter(shared)
    return shared


def _flush_forever(shared: RepeatFilter) -> None:
    while True:
        time.sleep(FLUSH_INTERVAL)
        try:
            shared.flush()
        except Exception:
            pass
