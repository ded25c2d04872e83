"""Rate-limited logging of repeated failures (docs/security.md: "repeated failures are logged
once per kind and minute with a count").

A flood (10,000 half-open connections, a database that refuses every write) makes the same
failure happen thousands of times a second. Logged one by one it fills the disk with
tracebacks and costs the CPU the daemon needs to recover. :class:`RepeatFilter` lets the
first record of a kind through, printed as it happens, and counts the rest; when the minute
is over it logs one line that says what it held back and since when ("N more like this held
back since T (the last at T'): <the last one>") and, while the failure goes on, one such
line a minute; the counts still open are logged when the process exits. A held record is
never printed as if it had just happened: the count line has its own time, and names the
times of what it counts. A kind
is the logger and the message *template* (``record.msg``, before its arguments), so "refused a
connection from %s" is one kind for every address, unless the record names its kind itself
(``extra={"repeat_kind": ...}``): an event of the event log is of its item and the method that
reported it, so that one item's flood does not hide another item's event, nor a give-up hide
behind its first failure. Records below WARNING are never held back.

:func:`limit_repeats` puts one shared filter on the loggers whose failures can repeat per
connection or per message (uvicorn's, asyncio's, the engine's workers, dispatchers, daemon
loop and stores) and starts a small thread that writes the counts when a minute ends, even
if nothing else is logged. The filter takes its clock as an argument, so the unit tests run
its minutes on a virtual clock.
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
FLUSH_INTERVAL = 5.0  # seconds between the background thread's looks at ended windows

# loggers whose failures can repeat per connection: an HTTP server's
SERVER_LOGGERS: tuple[str, ...] = (
    "uvicorn", "uvicorn.error", "uvicorn.access", "asyncio",
    "engine.serving.limits", "engine.portal.app", "engine.portal.server",
)
# ... and per message or per tick: those of the daemon (``encore run``) too
REPEATING_LOGGERS: tuple[str, ...] = SERVER_LOGGERS + (
    "engine.runtime.daemon", "engine.delivery.dispatch", "engine.delivery.item",
    "engine.delivery.worker", "engine.delivery.attempt_runner", "engine.runtime.scheduler",
    "engine.runtime.cluster", "engine.runtime.alerts",
    "engine.observe.metrics", "engine.store.sql", "engine.store.eventlog", "engine.store.notify",
    "engine.store.doorbell",
)

_SUMMARY = "%d more like this held back since %s (the last at %s): %s"
_TIMES = logging.Formatter()  # the times of held records, as the log's own lines show them


@dataclass(slots=True)
class _Run:
    """One kind's current window: when it began (the filter's clock), how many records it
    held back, the first of them and the last record of the kind."""

    started: float
    held: int
    last: logging.LogRecord
    first_held: logging.LogRecord | None = None


class RepeatFilter(logging.Filter):
    """Let the first record of a kind through per ``window`` seconds; count the others and
    log the count when the window ends (:meth:`flush`)."""

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
        """Log the count of every window that has ended (``everything``: of every window,
        as the process exits); return how many lines that was."""
        with self._lock:
            ended = self._take_ended(self._clock(), everything=everything)
        self._emit(ended)
        return len(ended)

    def held(self) -> int:
        """Records held back in the current windows (for tests and metrics)."""
        with self._lock:
            return sum(run.held for run in self._runs.values())

    def _take_ended(self, now: float, *, everything: bool = False) -> list[_Run]:
        """The ended windows that held records back; a kind that is still failing starts a
        new window with its count line, one that went quiet is forgotten. ``everything``:
        end every window and forget every kind."""
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
        """One line per ended window, at the time it is printed, naming what it counts:
        how many, since when, and the last of them with its own time."""
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
        except Exception:  # the flusher must outlive a broken handler
            pass
