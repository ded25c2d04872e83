"""The Visual Trace stays readable (docs/portal.md): long idle stretches are breaks with their
length, a page holds at most 100 messages, servers are named in full, and the legend draws
each line as the picture does."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.errors import OperatorError
from engine.portal.trace_scale import BREAK_HEIGHT, duration_text
from engine.portal.trace_svg import STYLES, render_trace
from engine.portal.trace_view import TRACE_PAGE, session_trace
from engine.store.rows import AttemptRow
from engine.store.sql import SqlStore

pytestmark = pytest.mark.dialect_free

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"
SERVER = "http://payments.internal.example.com:8765/soap/v2/endpoint"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def request(message_id: int, start: float, end: float, status: str = "Error") -> dict[str, Any]:
    return {"id": message_id, "session_id": 1, "source": "cli", "target": "Payments",
            "kind": "request", "status": status, "error_text": "gave up",
            "time_created": at(start), "time_completed": at(end)}


def resend_after_a_long_gap() -> tuple[Any, ...]:
    """Two timeouts 10 s apart, then — 15 minutes later — a resend that succeeds."""
    first = request(1, 0, 17)
    second = request(2, 917, 917.3, "Completed")
    second["source"] = "resend:1"
    attempts = {1: [AttemptRow(1, 1, 1, SERVER, at(0), at(7), "timeout", None, "no answer"),
                    AttemptRow(2, 1, 2, SERVER, at(10), at(17), "timeout", None, "no answer")],
                2: [AttemptRow(3, 2, 1, SERVER, at(917), at(917.3), "ok", 200, None)]}
    return [first, second], attempts, []


def rendered(*session: Any) -> ET.Element:
    return ET.fromstring(render_trace(*session))


def y_of(root: ET.Element, attempt_id: str, message: str) -> float:
    for group in root.iter(f"{SVG}g"):
        if group.get("data-attempt") == attempt_id and message in "".join(group.itertext()):
            return float(group.find(f"{SVG}rect").get("y"))
    raise AssertionError(f"no attempt {attempt_id}")


def test_a_long_idle_stretch_is_a_break_with_its_length_not_empty_height() -> None:
    root = rendered(*resend_after_a_long_gap())
    breaks = root.findall(f".//{SVG}g[@class='break']")
    assert len(breaks) == 1
    assert float(breaks[0].get("data-seconds")) == pytest.approx(900.0)
    assert "15 min 0 s later" in "".join(breaks[0].itertext())
    # the two timed-out attempts keep a readable distance: 10 s are not crushed by 15 min
    first, second = y_of(root, "1", "#1 timeout"), y_of(root, "2", "#2 timeout")
    assert second - first > 100
    resend = y_of(root, "1", "#1 ok")
    assert resend - second < 10 * (second - first) + BREAK_HEIGHT  # no 15 minutes of height
    assert float(root.get("height")) < 1200


def test_short_waits_stay_on_the_linear_scale_without_breaks() -> None:
    messages, attempts, events = resend_after_a_long_gap()
    root = rendered(messages[:1], {1: attempts[1]}, events)
    assert root.findall(f".//{SVG}g[@class='break']") == []
    waits = ["".join(w.itertext()) for w in root.findall(f".//{SVG}g[@class='retry-wait']")]
    assert waits == ["wait 3.000 s"]


def test_an_attempt_in_flight_for_long_is_never_cut() -> None:
    long_call = {1: [AttemptRow(1, 1, 1, SERVER, at(0), at(60), "timeout", None, None)]}
    root = rendered([request(1, 0, 60)], long_call, [])
    assert root.findall(f".//{SVG}g[@class='break']") == []


def test_a_server_is_named_with_scheme_host_and_port_in_full_and_its_address_in_a_tooltip(
        ) -> None:
    root = rendered(*resend_after_a_long_gap())
    server = root.find(f".//{SVG}g[@data-participant='server {SERVER}']")
    lines = [t.text for t in server.findall(f"{SVG}text")]
    assert lines[0] == "server"
    assert "".join(lines[1:]) == "http://payments.internal.example.com:8765"
    assert all(len(line) <= 26 for line in lines)  # wrapped, never cut with an ellipsis
    assert server.find(f"{SVG}title").text == f"server {SERVER}"


def test_the_legend_draws_each_style_as_the_picture_draws_it() -> None:
    root = rendered(*resend_after_a_long_gap())
    legend = {g.get("data-legend"): g for g in root.findall(f".//{SVG}g[@data-legend]")}
    assert set(legend) == {*STYLES, "break", "own_work", "cut_short"}
    late = [line for line in root.iter(f"{SVG}line") if line.get("class") == "late_reply"]
    ok = [line for line in root.iter(f"{SVG}line") if line.get("class") == "reply_ok"]
    waits = [g.find(f"{SVG}line") for g in root.findall(f".//{SVG}g[@class='retry-wait']")]
    assert len(late) == 2 and len(ok) == 1 and len(waits) == 1
    for key, drawn in (("late_reply", late[0]), ("reply_ok", ok[0]), ("retry_wait", waits[0])):
        sample = legend[key].find(f"{SVG}line")
        for attribute in ("stroke", "stroke-dasharray", "stroke-width"):
            assert sample.get(attribute) == drawn.get(attribute), (key, attribute)
    # the late reply and the retry wait are told apart: neither is the other's style
    assert late[0].get("stroke-dasharray") != waits[0].get("stroke-dasharray")
    assert "late reply" in "".join(legend["late_reply"].itertext())
    assert "retry wait" in "".join(legend["retry_wait"].itertext())


@pytest.mark.parametrize("seconds, text", [
    (12.5, "12.5 s"), (252, "4 min 12 s"), (7500, "2 h 5 min"), (273600, "3 d 4 h"),
])
def test_a_break_s_length_reads_as_a_person_says_it(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_a_session_of_many_messages_is_drawn_a_hundred_at_a_time(store: SqlStore) -> None:
    first = store.enqueue(target="Payments", body_class=None, body="{}", source="cli")
    for _ in range(2 * TRACE_PAGE + 49):
        store.enqueue(target="Payments", body_class=None, body="{}", source="cli",
                      session_id=first)
    pages = [session_trace(store, first, n) for n in (1, 2, 3)]
    assert [len(p["messages"]) for p in pages] == [TRACE_PAGE, TRACE_PAGE, 50]
    assert pages[0]["pages"] == 3 and pages[2]["total"] == 250
    assert pages[1]["messages"][0]["id"] == pages[0]["messages"][-1]["id"] + 1
    assert len(ET.fromstring(pages[0]["svg"]).findall(f".//{SVG}g[@data-message]")) == 100
    with pytest.raises(OperatorError, match="has 3 page"):
        session_trace(store, first, 4)
