"""The marks every part of the Visual Trace draws with: its colours, the styles of its
lines (:data:`STYLES`, which the legend samples too), a text (escaped by ElementTree), an
attempt's bar on a lifeline and the ✕ where an attempt was cut short."""
from __future__ import annotations

import xml.etree.ElementTree as ET

OK, FAIL, NEUTRAL = "#2e7d32", "#c62828", "#37474f"
WAIT_COLOUR = "#78909c"

# How each kind of line is drawn; the legend draws its samples from the same table.
STYLES: dict[str, dict[str, str]] = {
    "message": {"stroke": NEUTRAL, "stroke-width": "2", "stroke-dasharray": ""},
    "reply_ok": {"stroke": OK, "stroke-width": "1.5", "stroke-dasharray": ""},
    "reply_failed": {"stroke": FAIL, "stroke-width": "1.5", "stroke-dasharray": ""},
    "late_reply": {"stroke": FAIL, "stroke-width": "1.5", "stroke-dasharray": "1 3"},
    "retry_wait": {"stroke": WAIT_COLOUR, "stroke-width": "1.5", "stroke-dasharray": "6 4"},
}


def style(key: str) -> dict[str, str]:
    return {k: v for k, v in STYLES[key].items() if v}


def text(parent: ET.Element, x: float, y: float, text: str, *, anchor: str = "start",
          colour: str = NEUTRAL, weight: str = "normal", size: int = 12) -> ET.Element:
    node = ET.SubElement(parent, "text", {"x": str(round(x, 1)), "y": str(round(y, 1)),
                                          "text-anchor": anchor, "fill": colour,
                                          "font-weight": weight, "font-size": str(size)})
    node.text = text
    return node


def short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def bar(group: ET.Element, x: float, y0: float, y1: float, colour: str) -> None:
    """The attempt's activation bar on the item's lifeline."""
    ET.SubElement(group, "rect", {"x": str(x - 4), "y": str(y0), "width": "8",
                                  "height": str(max(y1 - y0, 2)), "fill": colour,
                                  "fill-opacity": "0.35"})


def cross(group: ET.Element, x: float, y: float) -> None:
    """The ✕ where an attempt was cut short."""
    ET.SubElement(group, "path", {"class": "cut-mark", "d": f"M{x - 5},{y - 5} l10,10 "
                                  f"M{x - 5},{y + 5} l10,-10", "stroke": FAIL,
                                  "stroke-width": "2.5", "fill": "none"})
