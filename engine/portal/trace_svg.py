"""The Visual Trace of a session as one inline SVG (docs/portal.md describes the picture).

This module lays it out and draws the columns, messages, breaks and events; attempts and
the legend are drawn by their own modules. Every text goes through ElementTree, which
escapes it.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from engine.portal.trace_attempt_marks import draw_attempts
from engine.portal.trace_attempts import cut_short, server_label
from engine.portal.trace_fit import horizontal_room, text_width
from engine.portal.trace_legend import draw_legend
from engine.portal.trace_marks import FAIL, NEUTRAL, OK, STYLES, short, style, text
from engine.portal.trace_scale import BREAK_HEIGHT, TimeAxis, duration_text, time_axis
from engine.store.inbound import InboundCall
from engine.store.operator import resent_from
from engine.store.rows import AttemptRow
from engine.store.statuses import Status

__all__ = ["FAIL", "OK", "STYLES", "caller_label", "participant_lines", "render_trace",
           "sender_label"]

HEADER_TOP = 8  # px above the participants' boxes
LINE_HEIGHT = 14  # px per line of a participant's name
HEADER_GAP = 36  # px between the boxes and the first instant
LEFT = 20  # px
COLUMN = 190  # px between participants
NAME_WIDTH = 26  # characters of a participant's name per line
EVENTS_WIDTH = 440  # px of the events column
EVENTS_GAP = 24  # px between the last column and the events (room for "late reply discarded")
BOTTOM = 48  # px below the last instant
EVENT_COLOURS = {"Error": FAIL, "Alert": FAIL, "Assert": FAIL, "Warning": "#ef6c00",
                 "Info": "#1565c0", "Trace": "#757575"}
TEXT_LIMIT = 64  # characters of an event or error shown in the picture (all in its tooltip)

def render_trace(messages: Sequence[Mapping[str, Any]],
                 attempts: Mapping[int, Sequence[AttemptRow]],
                 events: Sequence[Mapping[str, Any]],
                 calls: Mapping[int, InboundCall] | None = None) -> str:
    """The SVG text of a session: its ``messages`` (oldest first), their ``attempts`` by
    message id, and its ``events``; ``calls``: the inbound calls that put messages in, by
    message id."""
    calls = calls or {}
    columns = _participants(messages, attempts, calls)
    header = HEADER_TOP + 16 + LINE_HEIGHT * max(
        (len(participant_lines(name)) for name in columns), default=1)
    scale = _scale(messages, attempts, events, top=header + HEADER_GAP)
    bottom = scale.y(_last_time(messages, attempts, events)) + BOTTOM
    events_x = LEFT + COLUMN * len(columns) + EVENTS_GAP
    width = events_x + _events_width(events)
    svg = ET.Element("svg", {"xmlns": "http://www.w3.org/2000/svg", "class": "trace",
                             "role": "img", "aria-label": "Visual Trace"})
    _markers(svg)
    backdrop = ET.SubElement(svg, "g", {"class": "backdrop"})  # the breaks, drawn last
    drawing = ET.SubElement(svg, "g", {"class": "drawing"})
    _columns(drawing, columns, header, bottom)
    for m in messages:
        _message(drawing, m, columns, scale)
        draw_attempts(drawing, m, attempts.get(m["id"], ()), columns, scale)
        if m["id"] in calls:
            _inbound(drawing, calls[m["id"]], columns, scale, bottom=bottom - BOTTOM)
    _events(drawing, events, columns, scale, x=events_x)
    height = bottom + draw_legend(drawing, bottom, width, left=LEFT)
    shift, width = horizontal_room(drawing, width)
    if shift:
        drawing.set("transform", f"translate({shift:.1f},0)")
    _breaks(backdrop, scale, width)
    svg.attrib.update({"width": f"{width:.0f}", "height": f"{height:.0f}",
                       "viewBox": f"0 0 {width:.0f} {height:.0f}"})
    return ET.tostring(svg, encoding="unicode")


# -- layout ------------------------------------------------------------------------------
def sender_label(source: str | None) -> str:
    """How a message's ``source`` is named as a participant."""
    original = resent_from(source)
    if original is not None:
        return f"operator (resend of {original})"
    return source or "(unknown sender)"


def caller_label(call: InboundCall) -> str:
    """How the caller of an inbound service is named as a participant."""
    return f"caller {call.caller}"


def _participants(messages: Sequence[Mapping[str, Any]],
                  attempts: Mapping[int, Sequence[AttemptRow]],
                  calls: Mapping[int, InboundCall]) -> dict[str, float]:
    """Column x of each participant: inbound callers first, then hosts in order of
    appearance, then servers."""
    hosts: list[str] = list(dict.fromkeys(caller_label(c) for c in calls.values()))
    servers: list[str] = []
    for m in messages:
        pair = ((sender_label(m["source"]), m["target"]) if m["kind"] == "request"
                else (m["source"] or "(unknown)", sender_label(m["target"])))
        hosts += [p for p in pair if p not in hosts]
        if m["kind"] != "request":
            continue  # a response is never attempted (and draws no attempt)
        for a in attempts.get(m["id"], ()):
            server = server_label(a)
            if server is not None and server not in servers:
                servers.append(server)
    names = hosts + [s for s in servers if s not in hosts]
    return {name: LEFT + COLUMN * i + COLUMN / 2 for i, name in enumerate(names)}


def participant_lines(name: str) -> list[str]:
    """A participant's name as its header shows it, in lines of at most NAME_WIDTH
    characters: a server as "server" over its scheme, host and port in full (the rest of
    its address is in the tooltip)."""
    if name.startswith("server ") and "://" in name:
        parts = urlsplit(name[len("server "):])
        address = f"{parts.scheme}://{parts.netloc}" if parts.netloc else name[7:]
        return ["server", *_wrap(address, NAME_WIDTH)]
    return _wrap(name, NAME_WIDTH)


def _wrap(text: str, width: int) -> list[str]:
    return [text[i:i + width] for i in range(0, len(text), width)] or [""]


def _times(messages: Sequence[Mapping[str, Any]], attempts: Mapping[int, Sequence[AttemptRow]],
           events: Sequence[Mapping[str, Any]]) -> list[datetime]:
    times = [t for m in messages for t in (m["time_created"], m["time_completed"]) if t]
    times += [t for rows in attempts.values() for a in rows for t in (a.started_at, a.ended_at)
              if t]
    return times + [e["time_logged"] for e in events]


def _scale(messages: Sequence[Mapping[str, Any]], attempts: Mapping[int, Sequence[AttemptRow]],
           events: Sequence[Mapping[str, Any]], *, top: float) -> TimeAxis:
    # a cut-short attempt's recorded end is when it was taken back: not a busy stretch
    status = {m["id"]: m["status"] for m in messages}
    busy = [(a.started_at, a.ended_at) for mid, rows in attempts.items() for a in rows
            if a.ended_at is not None and not cut_short(a, status.get(mid, ""))]
    return time_axis(_times(messages, attempts, events), busy, top=top,
                     labelled=[m["time_created"] for m in messages])


def _last_time(messages: Sequence[Mapping[str, Any]], attempts: Mapping[int, Sequence[AttemptRow]],
               events: Sequence[Mapping[str, Any]]) -> datetime | None:
    times = _times(messages, attempts, events)
    return max(times) if times else None


# -- drawing -----------------------------------------------------------------------------
def _markers(svg: ET.Element) -> None:
    defs = ET.SubElement(svg, "defs")
    for name, colour in (("ok", OK), ("fail", FAIL), ("msg", NEUTRAL)):
        marker = ET.SubElement(defs, "marker", {
            "id": f"arrow-{name}", "viewBox": "0 0 10 10", "refX": "10", "refY": "5",
            "markerWidth": "7", "markerHeight": "7", "orient": "auto-start-reverse"})
        ET.SubElement(marker, "path", {"d": "M0,0 L10,5 L0,10 z", "fill": colour})


def _columns(svg: ET.Element, columns: Mapping[str, float], header: float,
             bottom: float) -> None:
    for name, x in columns.items():
        group = ET.SubElement(svg, "g", {"class": "participant", "data-participant": name})
        ET.SubElement(group, "title").text = name
        ET.SubElement(group, "rect", {"x": str(x - COLUMN / 2 + 8), "y": str(HEADER_TOP),
                                      "width": str(COLUMN - 16),
                                      "height": str(header - HEADER_TOP), "rx": "4",
                                      "fill": "#eceff1", "stroke": "#90a4ae"})
        for i, line in enumerate(participant_lines(name)):
            text(group, x, HEADER_TOP + 18 + i * LINE_HEIGHT, line, anchor="middle",
                  weight="bold" if i == 0 else "normal", size=12 if i == 0 else 11)
        ET.SubElement(group, "line", {"x1": str(x), "y1": str(header), "x2": str(x),
                                      "y2": str(bottom - 10), "stroke": "#b0bec5",
                                      "stroke-dasharray": "4 4"})


def _breaks(svg: ET.Element, scale: TimeAxis, width: float) -> None:
    """Each stretch of time cut out: a band across the picture with its length."""
    for b in scale.breaks:
        group = ET.SubElement(svg, "g", {"class": "break", "data-seconds": f"{b.seconds:.3f}"})
        ET.SubElement(group, "title").text = f"{duration_text(b.seconds)} without activity"
        ET.SubElement(group, "rect", {"x": "0", "y": str(b.y + 4), "width": str(width),
                                      "height": str(BREAK_HEIGHT - 8), "fill": "#fafafa"})
        for y in (b.y + 4, b.y + BREAK_HEIGHT - 4):
            ET.SubElement(group, "path", {"d": _zigzag(y, width), "fill": "none",
                                          "stroke": "#90a4ae", "stroke-width": "1"})
        text(group, LEFT, b.y + BREAK_HEIGHT / 2 + 4,
              f"⋯ {duration_text(b.seconds)} later ⋯", colour="#546e7a", size=11,
              weight="bold")


def _zigzag(y: float, width: float, step: float = 8.0) -> str:
    points = [f"{x:.0f},{y + (2 if i % 2 else -2):.1f}"
              for i, x in enumerate(range(0, int(width) + 1, int(step)))]
    return "M" + " L".join(points)


def _message(svg: ET.Element, m: Mapping[str, Any], columns: Mapping[str, float],
             scale: TimeAxis) -> None:
    if m["kind"] == "request":
        start, end = columns[sender_label(m["source"])], columns[m["target"]]
    else:
        start, end = columns[m["source"] or "(unknown)"], columns[sender_label(m["target"])]
    y = scale.y(m["time_created"])
    link = ET.SubElement(svg, "a", {"href": f"/messages/{m['id']}"})
    group = ET.SubElement(link, "g", {"class": f"message status-{m['status']}",
                                      "data-message": str(m["id"])})
    ET.SubElement(group, "title").text = f"message {m['id']} ({m['kind']}): {m['status']}"
    ET.SubElement(group, "line", {"x1": str(start), "y1": str(y), "x2": str(end - 3),
                                  "y2": str(y), **style("message"),
                                  "marker-end": "url(#arrow-msg)"})
    kind = "response" if m["kind"] == "response" else m["status"]
    text(group, (start + end) / 2, y - 6, f"message {m['id']} · {kind}", anchor="middle")
    if m["kind"] == "request" and m["time_completed"] and m["status"] != Status.COMPLETED:
        colour = FAIL if m["status"] == Status.ERROR else NEUTRAL
        reason = f": {m['error_text']}" if m["error_text"] else ""
        ending = text(svg, end + 10, scale.y(m["time_completed"]) + 30,
                       short(f"message {m['id']} {m['status']}{reason}", 48), colour=colour,
                       weight="bold")
        ET.SubElement(ending, "title").text = f"{m['status']}{reason}"


def _inbound(svg: ET.Element, call: InboundCall, columns: Mapping[str, float], scale: TimeAxis,
             *, bottom: float) -> None:
    """The caller's request to the service, and the service's answer back to it."""
    caller, service = columns[caller_label(call)], columns.get(call.service)
    if service is None:
        return
    arrows = [("inbound-request", call.received_at, caller, service, call.request)]
    if call.answered_at is not None:
        arrows.append(("inbound-answer", call.answered_at, service, caller,
                       f"answer: {call.answer or ''}"))
    for kind, when, start, end, label in arrows:
        y = min(max(scale.y(when), scale.top), bottom)
        group = ET.SubElement(svg, "g", {"class": kind, "data-message": str(call.message_id)})
        ET.SubElement(group, "title").text = f"{label} ({call.caller}" + (
            f", {call.principal})" if call.principal else ")")
        ET.SubElement(group, "line", {"x1": str(start), "y1": str(y),
                                      "x2": str(end + (3 if end < start else -3)),
                                      "y2": str(y), "stroke": NEUTRAL, "stroke-width": "2",
                                      "marker-end": "url(#arrow-msg)"})
        text(group, (start + end) / 2, y - 6, short(label, 30), anchor="middle")


def _events_width(events: Sequence[Mapping[str, Any]]) -> float:
    """The events column: EVENTS_WIDTH, or wider for its longest text."""
    longest = max((text_width(_event_text(e), 11) for e in events), default=0.0)
    return max(EVENTS_WIDTH, 10 + longest + 10)


def _event_text(e: Mapping[str, Any]) -> str:
    return short(f"[{e['type']}] {e['text']}", TEXT_LIMIT)


def _events(svg: ET.Element, events: Sequence[Mapping[str, Any]], columns: Mapping[str, float],
            scale: TimeAxis, *, x: float) -> None:
    group = ET.SubElement(svg, "g", {"class": "events"})
    text(group, x + 10, 28, "events", weight="bold")
    last_y = 0.0
    for e in events:
        y = scale.y(e["time_logged"])
        colour = EVENT_COLOURS.get(e["type"], NEUTRAL)
        item_x = columns.get(e["config_name"] or "")
        if item_x is not None:
            ET.SubElement(group, "circle", {"cx": str(item_x), "cy": str(y), "r": "4",
                                            "fill": colour})
        text_y = max(y + 4, last_y + 13)  # events close in time stack instead of overlapping
        last_y = text_y
        entry = text(group, x + 10, text_y, _event_text(e), colour=colour, size=11)
        entry.set("data-event", str(e["id"]))
        ET.SubElement(entry, "title").text = f"[{e['type']}] {e['text']}"

