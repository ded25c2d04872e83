"""The Visual Trace invents nothing (docs/portal.md): an item's own work stays on its own
lifeline, only an attempt with a recorded server draws that server, an attempt cut short by
its daemon's death is marked so, and every text has room in the picture."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.errors import CRASH_TEXT
from engine.portal.trace_fit import extent
from engine.portal.trace_svg import render_trace
from engine.store.rows import AttemptRow

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"
URL = "http://127.0.0.1:8765/pay"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def message(mid: int, source: str, target: str, kind: str = "request",
            status: str = "Completed", start: float = 0.0) -> dict[str, Any]:
    return {"id": mid, "session_id": 1, "source": source, "target": target, "kind": kind,
            "status": status, "error_text": None, "time_created": at(start),
            "time_completed": at(start + 1)}


def router_hop(router_attempts: list[AttemptRow] | None = None,
               router_status: str = "Completed") -> tuple[Any, ...]:
    """cli → Router → Payments, Payments calling its server, the responses back."""
    messages = [message(1, "cli", "Router", status=router_status),
                message(2, "Router", "Payments", start=0.01),
                message(3, "Payments", "Router", "response", start=0.5),
                message(4, "Router", "cli", "response", start=0.51)]
    attempts = {1: router_attempts or [AttemptRow(1, 1, 1, None, at(0), at(0.51), "ok", None,
                                                  None)],
                2: [AttemptRow(2, 2, 1, URL, at(0.02), at(0.5), "ok", 200, None)]}
    return messages, attempts, []


def participants(root: ET.Element) -> list[str | None]:
    return [g.get("data-participant") for g in root.findall(f".//{SVG}g[@data-participant]")]


def attempt_of(root: ET.Element, message_arrow_text: str) -> ET.Element:
    for group in root.iter(f"{SVG}g"):
        if group.get("data-attempt") and message_arrow_text in (
                group.findtext(f"{SVG}title") or ""):
            return group
    raise AssertionError(f"no attempt whose title has {message_arrow_text!r}")


def test_a_router_hop_has_exactly_the_participants_that_took_part() -> None:
    root = ET.fromstring(render_trace(*router_hop()))
    assert participants(root) == ["cli", "Router", "Payments", f"server {URL}"]
    assert "remote server" not in ET.tostring(root, encoding="unicode")


def test_a_router_s_own_work_is_a_bar_on_its_lifeline_with_no_arrow() -> None:
    root = ET.fromstring(render_trace(*router_hop()))
    own = attempt_of(root, "own work")
    assert "own-work" in own.get("class", "") and own.findall(f"{SVG}line") == []
    router_x = float(root.find(f".//{SVG}g[@data-participant='Router']/{SVG}line").get("x1"))
    bar = own.find(f"{SVG}rect")
    assert float(bar.get("x")) + float(bar.get("width")) / 2 == router_x
    assert "#1 ok · 0.510 s" in "".join(own.itertext())
    remote = attempt_of(root, f"to {URL}")
    assert len(remote.findall(f"{SVG}line")) == 2  # the request, the answer


def test_a_crash_cut_attempt_draws_to_its_recorded_server_and_is_marked_cut_short() -> None:
    messages, attempts, events = router_hop()
    attempts[2] = [AttemptRow(2, 2, 1, URL, at(0.02), at(3.73), "error", None, CRASH_TEXT),
                   AttemptRow(5, 2, 2, URL, at(3.74), at(3.8), "ok", 200, None)]
    root = ET.fromstring(render_trace(messages, attempts, events))
    assert participants(root) == ["cli", "Router", "Payments", f"server {URL}"]
    cut = [g for g in root.iter(f"{SVG}g") if g.get("data-cut-short") == "true"]
    assert len(cut) == 1 and cut[0].get("data-attempt") == "1"
    server_x = float(root.find(f".//{SVG}g[@data-participant='server {URL}']/{SVG}line")
                     .get("x1"))
    request = cut[0].find(f"{SVG}line")
    assert server_x - 10 < float(request.get("x2")) < server_x  # up to the server's ✕
    assert cut[0].find(f"{SVG}path[@class='cut-mark']") is not None
    text = "".join(t.text or "" for t in cut[0].findall(f"{SVG}text"))
    assert "cut short" in text and "daemon died" in text
    assert "3.710" not in text and "error ·" not in text  # no invented reply or duration
    assert "taken back 3.710 s after it began" in cut[0].findtext(f"{SVG}title")


@pytest.mark.parametrize("attempt, status", [
    # recovered by the next delivery, no server recorded (before the server was written
    # with the attempt's start)
    (AttemptRow(1, 1, 1, None, at(0), at(3.71), "error", None, CRASH_TEXT), "Completed"),
    # still open, its message taken back to its queue: not yet delivered again
    (AttemptRow(1, 1, 1, None, at(0), None, None, None, None), "Queued"),
])
def test_a_crash_cut_attempt_without_a_server_invents_no_server(attempt: AttemptRow,
                                                                  status: str) -> None:
    root = ET.fromstring(render_trace(*router_hop([attempt], router_status=status)))
    assert participants(root) == ["cli", "Router", "Payments", f"server {URL}"]
    cut = [g for g in root.iter(f"{SVG}g") if g.get("data-cut-short") == "true"]
    assert len(cut) == 1 and cut[0].findall(f"{SVG}line") == []
    assert cut[0].find(f"{SVG}path[@class='cut-mark']") is not None


def test_an_open_attempt_of_a_message_being_delivered_is_in_flight_not_cut() -> None:
    open_one = AttemptRow(1, 1, 1, None, at(0), None, None, None, None)
    root = ET.fromstring(render_trace(*router_hop([open_one], router_status="Delivered")))
    assert not [g for g in root.iter(f"{SVG}g") if g.get("data-cut-short")]
    assert "#1 in flight" in "".join(attempt_of(root, "own work").itertext())


def test_every_text_and_the_legend_fit_in_the_picture() -> None:
    messages, attempts, _ = router_hop()
    events = [{"id": 1, "type": "Trace", "config_name": "Router", "time_logged": at(0.01),
               "text": "rule 1 (rules[0]) matched: routed to Payments " + "W" * 60}]
    root = ET.fromstring(render_trace(messages, attempts, events))
    width = float(root.get("width"))
    shift = root.find(f"{SVG}g[@class='drawing']").get("transform")
    offset = float(shift[10:].split(",")[0]) if shift else 0.0
    for node in root.iter(f"{SVG}text"):
        left, right = extent(node)
        if node in list(root.find(f"{SVG}g[@class='drawing']").iter(f"{SVG}text")):
            left, right = left + offset, right + offset
        assert 0 <= left and right <= width, (node.text, left, right, width)
    legend = root.findall(f".//{SVG}g[@data-legend]")
    rows = {e.find(f"{SVG}text").get("y") for e in legend}
    assert len(legend) == 8 and len(rows) >= 2  # three columns: wrapped, not clipped
