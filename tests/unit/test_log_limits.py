"""Repeated failures are logged once per kind and minute with a count (docs/security.md), on a
virtual clock: :class:`engine.observe.logs.RepeatFilter` takes its clock as an argument."""
from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from engine.observe.logs import RepeatFilter, limit_repeats


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def at(seconds: float) -> str:
    """A time as the log prints it (``asctime``)."""
    record = logging.makeLogRecord({})
    record.created, record.msecs = seconds, int((seconds - int(seconds)) * 1000) + 0.0
    return logging.Formatter().formatTime(record)


@pytest.fixture(autouse=True)
def records_on_the_clock(clock: Clock) -> Iterator[None]:
    """Records made while a test runs are stamped with its virtual clock's time."""
    make = logging.getLogRecordFactory()

    def stamped(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        record.created, record.msecs = clock.now, int((clock.now % 1) * 1000) + 0.0
        return record
    logging.setLogRecordFactory(stamped)
    yield
    logging.setLogRecordFactory(make)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def logged(clock: Clock) -> Iterator[tuple[logging.Logger, RepeatFilter, list[str]]]:
    logger = logging.getLogger("tests.repeats")
    handler = Lines()
    repeats = RepeatFilter(window=60.0, clock=clock)
    logger.addHandler(handler)
    logger.addFilter(repeats)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    yield logger, repeats, handler.lines
    logger.removeHandler(handler)
    logger.removeFilter(repeats)
    logger.propagate = True


def test_the_first_of_a_kind_passes_and_the_rest_of_its_minute_is_one_line_with_a_count(
        clock: Clock, logged: tuple[logging.Logger, RepeatFilter, list[str]]) -> None:
    logger, repeats, lines = logged
    times = []
    for n in range(1000):
        times.append(clock.now)
        logger.warning("refused a connection from %s: %s reached", f"10.0.0.{n % 250}",
                       "max_connections")
        clock.now += 0.05  # 1000 in 50 s
    assert lines == ["WARNING tests.repeats: refused a connection from 10.0.0.0: "
                     "max_connections reached"]
    assert repeats.held() == 999
    clock.now = 1000.0 + 59.9
    assert repeats.flush() == 0  # the minute is not over
    clock.now = 1000.0 + 60.0
    assert repeats.flush() == 1
    # what was held back, since when and until when: not the last one printed as if new
    assert lines[1] == (f"WARNING tests.repeats: 999 more like this held back since "
                        f"{at(times[1])} (the last at {at(times[-1])}): refused a connection "
                        "from 10.0.0.249: max_connections reached")


def test_a_failure_that_goes_on_gets_one_line_a_minute_and_one_that_stops_is_forgotten(
        clock: Clock, logged: tuple[logging.Logger, RepeatFilter, list[str]]) -> None:
    logger, repeats, lines = logged
    for _second in range(180):  # three minutes, ten a second
        for _ in range(10):
            logger.error("item %s: %s; trying again in %.0f s", "Http", "disk I/O error", 1)
        clock.now += 1.0
        repeats.flush()
    assert len(lines) == 1 + 3  # the first, then one count a minute
    assert [line.split(": ", 1)[1].split(" (")[0] for line in lines[1:]] == [
        f"599 more like this held back since {at(1000.0)}",  # the 2nd of the first second
        f"600 more like this held back since {at(1060.0)}",
        f"600 more like this held back since {at(1120.0)}"]
    clock.now += 61.0
    assert repeats.flush() == 0  # quiet for a whole minute: nothing to count ...
    logger.error("item %s: %s; trying again in %.0f s", "Http", "disk I/O error", 1)
    assert len(lines) == 5 and "held back" not in lines[-1]  # ... and it passes again


def test_kinds_are_counted_apart_and_info_is_never_held(
        clock: Clock, logged: tuple[logging.Logger, RepeatFilter, list[str]]) -> None:
    logger, repeats, lines = logged
    for n in range(5):
        logger.info("message %d delivered", n)
        logger.warning("could not accept a connection (%s)", "EMFILE")
        logger.error("could not accept a connection (%s)", "EMFILE")  # another level
        logger.warning("closed a connection from %s", "127.0.0.2")
    assert sum("delivered" in line for line in lines) == 5
    assert len(lines) == 5 + 3
    clock.now += 60.0
    logger.warning("closed a connection from %s", "127.0.0.3")  # any record flushes ended ones
    counts = [line.split(": ", 1)[1].split(" held back")[0] for line in lines
              if "held back" in line]
    assert counts == ["4 more like this"] * 3


def test_a_traceback_is_logged_with_the_first_record_only(
        clock: Clock, logged: tuple[logging.Logger, RepeatFilter, list[str]]) -> None:
    logger, repeats, lines = logged
    records: list[logging.LogRecord] = []
    keeper = logging.Handler()
    keeper.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(keeper)
    try:
        for _ in range(3):
            try:
                raise OSError(24, "Too many open files")
            except OSError:
                logger.exception("unexpected error in worker")
        clock.now += 60.0
        repeats.flush()
    finally:
        logger.removeHandler(keeper)
    assert [r.exc_info is not None for r in records] == [True, False]
    assert records[1].getMessage() == (f"2 more like this held back since {at(1000.0)} "
                                       f"(the last at {at(1000.0)}): unexpected error in "
                                       "worker")


def test_limit_repeats_puts_one_shared_filter_on_each_logger_once() -> None:
    names = ("tests.repeats.a", "tests.repeats.b")
    first = limit_repeats(names)
    assert limit_repeats(names) is first
    for name in names:
        assert logging.getLogger(name).filters.count(first) == 1
        logging.getLogger(name).removeFilter(first)


def test_the_counts_still_open_are_logged_when_everything_is_flushed(
        clock: Clock, logged: tuple[logging.Logger, RepeatFilter, list[str]]) -> None:
    logger, repeats, lines = logged
    for _ in range(7):
        logger.warning("closed a connection from %s", "127.0.0.2")
    clock.now += 5.0  # the minute is not over, but the process exits
    assert repeats.flush(everything=True) == 1
    assert f": 6 more like this held back since {at(1000.0)} " in lines[-1]
    assert repeats.held() == 0 and repeats.flush(everything=True) == 0
    logger.warning("closed a connection from %s", "127.0.0.2")
    assert len(lines) == 3  # a new window: the first passes


def test_events_are_of_their_item_and_reporting_method_not_of_one_shared_template(
        clock: Clock) -> None:
    """The event log mirrors every event through one template ("[item] message N: text"):
    each names its kind, so a flood of one item's first failures is held back while another
    item's event, and the same item's give-up, still reach the log at once."""
    from engine.store.eventlog import SqlEventLog
    from engine.store.memory import memory_store

    store = memory_store()
    handler = Lines()
    repeats = RepeatFilter(window=60.0, clock=clock)
    logger = logging.getLogger("engine.store.eventlog")
    logger.addHandler(handler)
    logger.addFilter(repeats)
    try:
        events: SqlEventLog = store.events
        for n in range(1, 51):  # fifty messages of Soap fail at once
            events.write("Error", f"attempt 1 failed: connection refused ({n})",
                         config_name="Soap", message_id=n, source_class="Soap",
                         source_method="on_first_failure")
        events.write("Error", "attempt 1 failed: HTTP 500", config_name="Http",
                     message_id=99, source_class="Http", source_method="on_first_failure")
        events.write("Error", "gave up after 2 attempts", config_name="Soap", message_id=1,
                     source_class="Soap", source_method="on_give_up")
        assert [line.split(": ", 1)[1] for line in handler.lines] == [
            "[Soap] message 1: attempt 1 failed: connection refused (1)",
            "[Http] message 99: attempt 1 failed: HTTP 500",
            "[Soap] message 1: gave up after 2 attempts"]
        assert repeats.held() == 49
        with store.engine.connect() as conn:  # the table has every one of them
            from sqlalchemy import text
            assert conn.execute(text("SELECT count(*) FROM event_log")).scalar() == 52
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(repeats)
        store.dispose()


def test_an_event_is_printed_with_its_own_time_not_the_time_it_reached_the_log() -> None:
    from datetime import UTC, datetime

    from engine.store.memory import memory_store

    store = memory_store()
    records: list[logging.LogRecord] = []
    keeper = logging.Handler()
    keeper.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("engine.store.eventlog")
    logger.addHandler(keeper)
    happened = datetime(2030, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC)
    try:
        store.events.write("Error", "attempt 1 failed: HTTP 500", config_name="Http",
                           message_id=7, now=happened)
    finally:
        logger.removeHandler(keeper)
        store.dispose()
    (record,) = records
    assert record.getMessage() == "[Http] message 7: attempt 1 failed: HTTP 500"
    assert (record.created, record.msecs) == (happened.timestamp(), 678.0)
