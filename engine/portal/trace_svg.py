"""The Visual Trace of a session as one inline SVG (docs/portal.md).

A column per participant — each sender (CLI, API, a service or process, an operator's
resend), each item, each server an attempt went to — with time flowing down on one linear
scale. One arrow per message between hosts (``data-message="ID"``, a link to
``/messages/ID``); one group per attempt (``data-attempt="K"``, ``data-outcome="…"``). An
attempt that went to a server (``message_attempt.server``) is an arrow from the item to it at
its start and the answer (or the timeout) back at its end; one without a server is the item's
own work (a process, a router), a bar on the item's own lifeline (``class="… own-work"``).
Either is labelled with the attempt number, outcome and duration, green for ``ok`` and red
otherwise. An attempt its daemon's death cut short (:mod:`engine.portal.trace_attempts`) is
marked ✕ where it was cut (``data-cut-short="true"``), at the server when one is recorded,
and has no duration.
A timed-out attempt's return is drawn in a style of its own, dotted, marked "late reply
discarded" (the engine never hands it on); the wait before the next attempt is a dashed line
with its length. A long stretch in which nothing happens is a break labelled with its length
(:mod:`engine.portal.trace_scale`), not empty height. Servers are named in full (scheme,
host and port, wrapped; the whole address in a tooltip). A legend under the time line shows
each style as it is drawn (:data:`STYLES`), in as many rows as the picture's width needs. The
session's events stand in a column on the right, each at its time, with a dot on its item's
line; the column is as wide as its longest text, and the picture widens for any text that
would run past an edge (:mod:`engine.portal.trace_fit`).

A session that an inbound service started (docs/inbound.md) has its caller — the client's
address — as the first participant: the request arrives from it, and the answer the service
gave goes back to it as the last arrow (``class="inbound-answer"``).

Every text goes through ElementTree, which escapes it: a body or an error holding markup is
shown as text.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from engine.portal.trace_attempts import CUT_SHORT, cut_short, server_label, taken_back_after
from engine.portal.trace_fit import horizontal_room, text_width
from engine.portal.trace_fit import rows as legend_rows
from engine.portal.trace_scale import BREAK_HEIGHT, TimeAxis, duration_text, time_axis
from engine.store.inbound import InboundCall
from engine.store.operator import resent_from
from engine.store.rows import AttemptRow

HEADER_TOP = 8  # px above the participants' boxes
LINE_HEIGHT = 14  # px per line of a participant's name
HEADER_GAP = 36  # px between the boxes and the first instant
LEFT = 20  # px
COLUMN = 190  # px between participants
NAME_WIDTH = 26  # characters of a participant's name per line
EVENTS_WIDTH = 440  # px of the events column
EVENTS_GAP = 24  # px between the last column and the events (room for "late reply discarded")
BOTTOM = 48  # px below the last instant
LEGEND_ROW = 22  # px per row of the legend under the time line
LEGEND_SIZE = 11  # px of the legend's texts
OK, FAIL, NEUTRAL = "#2e7d32", "#c62828", "#37474f"
WAIT_COLOUR = "#78909c"
EVENT_COLOURS = {"Error": FAIL, "Alert": FAIL, "Assert": FAIL, "Warning": "#ef6c00",
                 "Info": "#1565c0", "Trace": "#757575"}
CUT_LABEL_BELOW = 20  # px under a cut-short attempt's start taken by its label
TEXT_LIMIT = 64  # characters of an event or error shown in the picture (all in its tooltip)

# How each kind of line is drawn; the legend draws its samples from the same table.
STYLES: dict[str, dict[str, str]] = {
    "message": {"stroke": NEUTRAL, "stroke-width": "2", "stroke-dasharray": ""},
    "reply_ok": {"stroke": OK, "stroke-width": "1.5", "stroke-dasharray": ""},
    "reply_failed": {"stroke": FAIL, "stroke-width": "1.5", "stroke-dasharray": ""},
    "late_reply": {"stroke": FAIL, "stroke-width": "1.5", "stroke-dasharray": "1 3"},
    "retry_wait": {"stroke": WAIT_COLOUR, "stroke-width": "1.5", "stroke-dasharray": "6 4"},
}
LEGEND = (("message", "message between hosts"), ("reply_ok", "attempt answered"),
          ("reply_failed", "attempt failed (error, fault, status)"),
          ("late_reply", "timed out: a late reply is discarded"),
          ("retry_wait", "retry wait"),
          ("own_work", "an item's own work (no server called)"),
          ("cut_short", "cut short: the daemon died during it"),
          ("break", "time skipped (its length written)"))


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
        _attempts(drawing, m, attempts.get(m["id"], ()), columns, scale)
        if m["id"] in calls:
            _inbound(drawing, calls[m["id"]], columns, scale, bottom=bottom - BOTTOM)
    _events(drawing, events, columns, scale, x=events_x)
    height = bottom + _legend(drawing, bottom, width)
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
            _text(group, x, HEADER_TOP + 18 + i * LINE_HEIGHT, line, anchor="middle",
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
        _text(group, LEFT, b.y + BREAK_HEIGHT / 2 + 4,
              f"⋯ {duration_text(b.seconds)} later ⋯", colour="#546e7a", size=11,
              weight="bold")


def _zigzag(y: float, width: float, step: float = 8.0) -> str:
    points = [f"{x:.0f},{y + (2 if i % 2 else -2):.1f}"
              for i, x in enumerate(range(0, int(width) + 1, int(step)))]
    return "M" + " L".join(points)


def _legend(svg: ET.Element, y: float, width: float) -> float:
    """A sample of each kind of line of :data:`LEGEND`, drawn as the picture draws it, in
    rows that fit ``width``; returns the legend's height."""
    group = ET.SubElement(svg, "g", {"class": "legend"})
    widths = [48 + text_width(label, LEGEND_SIZE) for _, label in LEGEND]
    laid = legend_rows(widths, width - 2 * LEFT)
    for row, indexes in enumerate(laid):
        x, top = float(LEFT), y + row * LEGEND_ROW
        for i in indexes:
            key, label = LEGEND[i]
            entry = ET.SubElement(group, "g", {"data-legend": key})
            _sample(entry, key, x, top + 16)
            _text(entry, x + 40, top + 20, label, size=LEGEND_SIZE)
            x += widths[i]
    return LEGEND_ROW * len(laid) + 18


def _sample(entry: ET.Element, key: str, x: float, y: float) -> None:
    """The legend's sample of ``key``, 34 px wide, on the line ``y``."""
    if key == "break":
        ET.SubElement(entry, "path", {"d": f"M{x:.0f},{y - 2} l6,4 l6,-4 l6,4 l6,-4",
                                      "fill": "none", "stroke": "#90a4ae"})
    elif key == "own_work":
        ET.SubElement(entry, "rect", {"x": str(x + 13), "y": str(y - 7), "width": "8",
                                      "height": "14", "fill": OK, "fill-opacity": "0.35"})
    elif key == "cut_short":
        ET.SubElement(entry, "line", {"x1": str(x), "y1": str(y), "x2": str(x + 26),
                                      "y2": str(y), "stroke": FAIL, "stroke-width": "2"})
        _cross(entry, x + 30, y)
    else:
        ET.SubElement(entry, "line", {"x1": str(x), "y1": str(y), "x2": str(x + 34),
                                      "y2": str(y), **_style(key)})


def _style(key: str) -> dict[str, str]:
    return {k: v for k, v in STYLES[key].items() if v}


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
                                  "y2": str(y), **_style("message"),
                                  "marker-end": "url(#arrow-msg)"})
    kind = "response" if m["kind"] == "response" else m["status"]
    _text(group, (start + end) / 2, y - 6, f"message {m['id']} · {kind}", anchor="middle")
    if m["kind"] == "request" and m["time_completed"] and m["status"] != "Completed":
        colour = FAIL if m["status"] == "Error" else NEUTRAL
        reason = f": {m['error_text']}" if m["error_text"] else ""
        ending = _text(svg, end + 10, scale.y(m["time_completed"]) + 30,
                       _short(f"message {m['id']} {m['status']}{reason}", 48), colour=colour,
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
        _text(group, (start + end) / 2, y - 6, _short(label, 30), anchor="middle")


def _attempts(svg: ET.Element, m: Mapping[str, Any], attempts: Sequence[AttemptRow],
              columns: Mapping[str, float], scale: TimeAxis) -> None:
    item = columns.get(m["target"])
    if item is None or m["kind"] != "request":
        return
    previous_end: datetime | None = None
    below = 0.0  # px under the previous attempt's end taken by its label
    for a in attempts:
        if previous_end is not None and a.started_at > previous_end:
            y0, y1 = scale.y(previous_end), scale.y(a.started_at)
            _wait(svg, item, min(y0 + below, y1), y1,
                  (a.started_at - previous_end).total_seconds())
        server = server_label(a)
        where = columns[server] if server is not None else None
        if cut_short(a, m["status"]):
            _cut_short(svg, a, item, where, scale)
            previous_end, below = a.started_at, CUT_LABEL_BELOW  # its end: when taken back
            continue
        _attempt(svg, a, item, where, scale)
        previous_end, below = a.ended_at or a.started_at, 0.0


def _attempt_group(svg: ET.Element, a: AttemptRow, kind: str, title: str) -> ET.Element:
    group = ET.SubElement(svg, "g", {"class": f"attempt outcome-{a.outcome or 'in_flight'} "
                                              f"{kind}",
                                     "data-attempt": str(a.attempt),
                                     "data-outcome": a.outcome or ""})
    if a.error_text:
        title += f" — {a.error_text}"
    ET.SubElement(group, "title").text = title
    return group


def _bar(group: ET.Element, x: float, y0: float, y1: float, colour: str) -> None:
    """The attempt's activation bar on the item's lifeline."""
    ET.SubElement(group, "rect", {"x": str(x - 4), "y": str(y0), "width": "8",
                                  "height": str(max(y1 - y0, 2)), "fill": colour,
                                  "fill-opacity": "0.35"})


def _cross(group: ET.Element, x: float, y: float) -> None:
    """The ✕ where an attempt was cut short."""
    ET.SubElement(group, "path", {"class": "cut-mark", "d": f"M{x - 5},{y - 5} l10,10 "
                                  f"M{x - 5},{y + 5} l10,-10", "stroke": FAIL,
                                  "stroke-width": "2.5", "fill": "none"})


def _cut_short(svg: ET.Element, a: AttemptRow, item: float, server: float | None,
               scale: TimeAxis) -> None:
    """An attempt its daemon's death cut short: the request to its server (when one is
    recorded) ending in ✕, or a ✕ on the item's own lifeline; no reply, no duration."""
    later = taken_back_after(a)
    to = f" to {a.server}" if a.server else ""
    title = f"attempt {a.attempt}{to}: {CUT_SHORT}" + (
        f"; taken back {later:.3f} s after it began" if later is not None else
        "; not yet taken back")
    group = _attempt_group(svg, a, "cut-short", title)
    group.set("data-cut-short", "true")
    y0 = scale.y(a.started_at)
    _bar(group, item, y0, y0 + 8, FAIL)
    if server is not None:
        ET.SubElement(group, "line", {"x1": str(item + 4), "y1": str(y0), "x2": str(server - 8),
                                      "y2": str(y0), "stroke": FAIL, "stroke-width": "2"})
        _cross(group, server - 3, y0)
    else:
        _cross(group, item + 14, y0)
    # left of the lifeline, under the arrow that brought the message: the right is where
    # the hop this attempt began (an arrow a row below, its label above it) is drawn
    _text(group, item - 10, y0 + CUT_LABEL_BELOW - 4, f"#{a.attempt} cut short: the daemon "
          "died", anchor="end", colour=FAIL, weight="bold")


def _attempt(svg: ET.Element, a: AttemptRow, item: float, server: float | None,
             scale: TimeAxis) -> None:
    ok = a.outcome == "ok"
    colour, arrow = (OK, "url(#arrow-ok)") if ok else (FAIL, "url(#arrow-fail)")
    y0, y1 = scale.y(a.started_at), scale.y(a.ended_at or a.started_at)
    took = f"{(a.ended_at - a.started_at).total_seconds():.3f} s" if a.ended_at else "in flight"
    if server is None:
        group = _attempt_group(svg, a, "own-work", f"attempt {a.attempt}, the item's own work "
                               f"(no server called): {a.outcome or 'in flight'}, {took}")
        _bar(group, item, y0, y1, colour if a.ended_at else NEUTRAL)
        label = f"#{a.attempt} in flight" if a.ended_at is None else \
            f"#{a.attempt} {a.outcome} · {took}"
        _text(group, item + 10, y1 + 14, label, colour=colour if a.ended_at else NEUTRAL,
              weight="bold" if a.ended_at else "normal")
        return
    group = _attempt_group(svg, a, "remote", f"attempt {a.attempt} to {a.server}: "
                           f"{a.outcome or 'in flight'}, {took}")
    _bar(group, item, y0, y1, colour)
    ET.SubElement(group, "line", {"x1": str(item + 4), "y1": str(y0), "x2": str(server - 3),
                                  "y2": str(y0), "stroke": colour, "stroke-width": "2",
                                  "marker-end": arrow})
    if a.ended_at is None:
        _text(group, item + 10, y0 + 14, f"#{a.attempt} in flight", colour=NEUTRAL)
        return
    reply = "reply_ok" if ok else "late_reply" if a.outcome == "timeout" else "reply_failed"
    ET.SubElement(group, "line", {"x1": str(server), "y1": str(y1), "x2": str(item + 7),
                                  "y2": str(y1), **_style(reply), "class": reply,
                                  "marker-end": arrow})
    detail = f" {a.status_code}" if a.status_code else ""
    _text(group, item + 10, y1 + 14, f"#{a.attempt} {a.outcome}{detail} · {took}",
          colour=colour, weight="bold")
    if a.outcome == "timeout":
        _text(group, server + 6, y1 - 4, "late reply discarded", colour=FAIL, size=10)


def _wait(svg: ET.Element, x: float, y0: float, y1: float, seconds: float) -> None:
    group = ET.SubElement(svg, "g", {"class": "retry-wait"})
    ET.SubElement(group, "line", {"x1": str(x - 12), "y1": str(y0), "x2": str(x - 12),
                                  "y2": str(y1), **_style("retry_wait")})
    if y1 - y0 > 12:
        _text(group, x - 16, (y0 + y1) / 2 + 4, f"wait {seconds:.3f} s", anchor="end",
              colour="#546e7a", size=10)


def _events_width(events: Sequence[Mapping[str, Any]]) -> float:
    """The events column: EVENTS_WIDTH, or wider for its longest text."""
    longest = max((text_width(_event_text(e), 11) for e in events), default=0.0)
    return max(EVENTS_WIDTH, 10 + longest + 10)


def _event_text(e: Mapping[str, Any]) -> str:
    return _short(f"[{e['type']}] {e['text']}", TEXT_LIMIT)


def _events(svg: ET.Element, events: Sequence[Mapping[str, Any]], columns: Mapping[str, float],
            scale: TimeAxis, *, x: float) -> None:
    group = ET.SubElement(svg, "g", {"class": "events"})
    _text(group, x + 10, 28, "events", weight="bold")
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
        entry = _text(group, x + 10, text_y, _event_text(e), colour=colour, size=11)
        entry.set("data-event", str(e["id"]))
        ET.SubElement(entry, "title").text = f"[{e['type']}] {e['text']}"


def _text(parent: ET.Element, x: float, y: float, text: str, *, anchor: str = "start",
          colour: str = NEUTRAL, weight: str = "normal", size: int = 12) -> ET.Element:
    node = ET.SubElement(parent, "text", {"x": str(round(x, 1)), "y": str(round(y, 1)),
                                          "text-anchor": anchor, "fill": colour,
                                          "font-weight": weight, "font-size": str(size)})
    node.text = text
    return node


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
