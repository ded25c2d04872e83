"""The legend under the Visual Trace: a sample of each kind of line and mark, drawn as the
picture draws it (:data:`engine.portal.trace_marks.STYLES`), in rows that fit its width."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from engine.portal.trace_fit import rows, text_width
from engine.portal.trace_marks import FAIL, OK, cross, style, text

LEGEND_ROW = 22  # px per row of the legend
LEGEND_SIZE = 11  # px of the legend's texts
LEGEND = (("message", "message between hosts"), ("reply_ok", "attempt answered"),
          ("reply_failed", "attempt failed (error, fault, status)"),
          ("late_reply", "timed out: a late reply is discarded"),
          ("retry_wait", "retry wait"),
          ("own_work", "an item's own work (no server called)"),
          ("cut_short", "cut short: the daemon died during it"),
          ("break", "time skipped (its length written)"))


def draw_legend(svg: ET.Element, y: float, width: float, *, left: float) -> float:
    """A sample of each kind of line of :data:`LEGEND`, drawn as the picture draws it, in
    rows that fit ``width``; returns the legend's height."""
    group = ET.SubElement(svg, "g", {"class": "legend"})
    widths = [48 + text_width(label, LEGEND_SIZE) for _, label in LEGEND]
    laid = rows(widths, width - 2 * left)
    for row, indexes in enumerate(laid):
        x, top = left, y + row * LEGEND_ROW
        for i in indexes:
            key, label = LEGEND[i]
            entry = ET.SubElement(group, "g", {"data-legend": key})
            _sample(entry, key, x, top + 16)
            text(entry, x + 40, top + 20, label, size=LEGEND_SIZE)
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
        cross(entry, x + 30, y)
    else:
        ET.SubElement(entry, "line", {"x1": str(x), "y1": str(y), "x2": str(x + 34),
                                      "y2": str(y), **style(key)})
