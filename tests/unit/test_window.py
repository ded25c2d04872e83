"""Schedule windows of operation items."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine.delivery.window import ScheduleWindow, check_window

WORKDAYS = {"start": "0 8 * * 1-5", "stop": "0 18 * * 1-5"}


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)  # 2026-11-30 is a Monday


@pytest.mark.parametrize(("when", "open_"), [
    (at(30, 7, 59), False),  # Monday before the start
    (at(30, 8, 0), True),  # at the start
    (at(30, 17, 59), True),  # just before the stop
    (at(30, 18, 0), False),  # at the stop
    (at(29, 12), False),  # Sunday noon: no start since Friday's stop
])
def test_the_window_is_open_between_the_last_start_and_the_next_stop(when: datetime,
                                                                       open_: bool) -> None:
    window = ScheduleWindow.from_setting(check_window(WORKDAYS))
    assert window is not None and window.is_open(when) is open_


def test_the_answer_changes_as_time_crosses_a_transition() -> None:
    window = ScheduleWindow.from_setting(check_window(WORKDAYS))
    assert [window.is_open(t) for t in (at(30, 7), at(30, 9), at(30, 19), at(30, 9))] == \
        [False, True, False, True]


@pytest.mark.parametrize("bad", [
    {"start": "0 8 * * 1-5"},  # no stop
    {"start": "0 8 * *", "stop": "0 18 * * *"},  # four fields
    {"start": "0 8 * * 1-5", "stop": "0 18 * * 1-5", "tz": "UTC"},  # an unknown key
])
def test_a_bad_window_is_refused_with_an_example(bad: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="start"):
        check_window(bad)


def test_an_empty_table_means_always_open() -> None:
    assert ScheduleWindow.from_setting(check_window({})) is None
