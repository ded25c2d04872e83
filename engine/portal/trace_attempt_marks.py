"""An attempt as the Visual Trace draws it (docs/portal.md): to its server and back when one
is recorded, a bar on the item's own lifeline when none is (its own work), ✕ where its
daemon's death cut it short (:mod:`engine.portal.trace_attempts`); the wait before the next
attempt dashed, with its length."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from engine.portal.trace_attempts import CUT_SHORT, cut_short, server_label, taken_back_after
from engine.portal.trace_marks import FAIL, NEUTRAL, OK, bar, cross, style, text
from engine.portal.trace_scale import TimeAxis
from engine.store.rows import AttemptRow

CUT_LABEL_BELOW = 20  # px under a cut-short attempt's start taken by its label


def draw_attempts(svg: ET.Element, m: Mapping[str, Any], attempts: Sequence[AttemptRow],
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
    bar(group, item, y0, y0 + 8, FAIL)
    if server is not None:
        ET.SubElement(group, "line", {"x1": str(item + 4), "y1": str(y0), "x2": str(server - 8),
                                      "y2": str(y0), "stroke": FAIL, "stroke-width": "2"})
        cross(group, server - 3, y0)
    else:
        cross(group, item + 14, y0)
    # left of the lifeline, under the arrow that brought the message: the right is where
    # the hop this attempt began (an arrow a row below, its label above it) is drawn
    text(group, item - 10, y0 + CUT_LABEL_BELOW - 4, f"#{a.attempt} cut short: the daemon "
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
        bar(group, item, y0, y1, colour if a.ended_at else NEUTRAL)
        label = f"#{a.attempt} in flight" if a.ended_at is None else \
            f"#{a.attempt} {a.outcome} · {took}"
        text(group, item + 10, y1 + 14, label, colour=colour if a.ended_at else NEUTRAL,
              weight="bold" if a.ended_at else "normal")
        return
    group = _attempt_group(svg, a, "remote", f"attempt {a.attempt} to {a.server}: "
                           f"{a.outcome or 'in flight'}, {took}")
    bar(group, item, y0, y1, colour)
    ET.SubElement(group, "line", {"x1": str(item + 4), "y1": str(y0), "x2": str(server - 3),
                                  "y2": str(y0), "stroke": colour, "stroke-width": "2",
                                  "marker-end": arrow})
    if a.ended_at is None:
        text(group, item + 10, y0 + 14, f"#{a.attempt} in flight", colour=NEUTRAL)
        return
    reply = "reply_ok" if ok else "late_reply" if a.outcome == "timeout" else "reply_failed"
    ET.SubElement(group, "line", {"x1": str(server), "y1": str(y1), "x2": str(item + 7),
                                  "y2": str(y1), **style(reply), "class": reply,
                                  "marker-end": arrow})
    detail = f" {a.status_code}" if a.status_code else ""
    text(group, item + 10, y1 + 14, f"#{a.attempt} {a.outcome}{detail} · {took}",
          colour=colour, weight="bold")
    if a.outcome == "timeout":
        text(group, server + 6, y1 - 4, "late reply discarded", colour=FAIL, size=10)


def _wait(svg: ET.Element, x: float, y0: float, y1: float, seconds: float) -> None:
    group = ET.SubElement(svg, "g", {"class": "retry-wait"})
    ET.SubElement(group, "line", {"x1": str(x - 12), "y1": str(y0), "x2": str(x - 12),
                                  "y2": str(y1), **style("retry_wait")})
    if y1 - y0 > 12:
        text(group, x - 16, (y0 + y1) / 2 + 4, f"wait {seconds:.3f} s", anchor="end",
              colour="#546e7a", size=10)
