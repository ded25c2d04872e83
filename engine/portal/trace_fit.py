"""Room for every text of the Visual Trace: widths estimated from length (erring wide), the
legend wrapped, the picture widened for text past an edge."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

EM_NORMAL = 0.64  # mean advance of a character, in em, of normal text (errs wide)
EM_BOLD = 0.70  # of bold text
MARGIN = 12.0  # px kept free past the rightmost text
SVG_NS = "{http://www.w3.org/2000/svg}"


def text_width(text: str, size: float, *, bold: bool = False) -> float:
    """Estimated px of ``text`` at ``size`` px."""
    return len(text) * size * (EM_BOLD if bold else EM_NORMAL)


def extent(node: ET.Element) -> tuple[float, float]:
    """The estimated left and right x of a ``<text>`` drawn by the trace."""
    x = float(node.get("x", "0"))
    width = text_width(node.text or "", float(node.get("font-size", "12")),
                       bold=node.get("font-weight") == "bold")
    anchor = node.get("text-anchor", "start")
    left = x - width if anchor == "end" else x - width / 2 if anchor == "middle" else x
    return left, left + width


def horizontal_room(svg: ET.Element, width: float) -> tuple[float, float]:
    """``(shift, width)``: how far right to move the drawing so that no text starts left of
    0, and the width that then holds every text (at least ``width``)."""
    lefts, rights = [0.0], [width - MARGIN]
    for node in svg.iter(f"{SVG_NS}text"):
        left, right = extent(node)
        lefts.append(left)
        rights.append(right)
    shift = -min(lefts) + (4.0 if min(lefts) < 0 else 0.0)
    return shift, max(width, max(rights) + shift + MARGIN)


def rows(widths: Sequence[float], room: float) -> list[list[int]]:
    """Indexes of ``widths`` laid left to right in rows no wider than ``room`` (an entry
    wider than the room has a row of its own)."""
    laid: list[list[int]] = [[]]
    used = 0.0
    for i, w in enumerate(widths):
        if laid[-1] and used + w > room:
            laid.append([])
            used = 0.0
        laid[-1].append(i)
        used += w
    return laid
