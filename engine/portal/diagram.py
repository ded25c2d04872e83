"""The layout of the production diagram (docs/portal.md): services, processes and operations
in three columns, an arrow for every declared target; the template draws it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

COLUMNS = ("service", "process", "operation")
TITLES = {"service": "Services", "process": "Processes", "operation": "Operations"}
BOX_W, BOX_H = 210, 56  # px
COL_GAP, ROW_GAP = 110, 22
TOP = 34  # room for the column titles
LEFT = 10


@dataclass(frozen=True)
class Box:
    name: str
    kind: str
    x: int
    y: int
    light: str
    why: str
    line: str  # queued · in flight, under the name


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    path: str


@dataclass(frozen=True)
class Diagram:
    width: int
    height: int
    boxes: list[Box]
    arrows: list[Arrow]
    titles: list[tuple[int, str]]  # (x of the column's centre, title)


def layout(items: list[dict[str, Any]]) -> Diagram:
    """The diagram of ``items`` (the rows of ``production_view``)."""
    rows = {kind: [i for i in items if i["kind"] == kind] for kind in COLUMNS}
    boxes: dict[str, Box] = {}
    for column, kind in enumerate(COLUMNS):
        x = LEFT + column * (BOX_W + COL_GAP)
        for row, item in enumerate(rows[kind]):
            line = f"queued {item['queued']} · in flight {item['in_flight']}" \
                if kind != "service" else "service"
            boxes[item["name"]] = Box(item["name"], kind, x, TOP + row * (BOX_H + ROW_GAP),
                                      item["light"], item["why"], line)
    arrows = [Arrow(item["name"], target, _path(boxes[item["name"]], boxes[target]))
              for item in items for target in item["targets"] if target in boxes]
    deepest = max((len(r) for r in rows.values()), default=0)
    height = TOP + max(deepest, 1) * (BOX_H + ROW_GAP) + 10
    width = LEFT * 2 + len(COLUMNS) * BOX_W + (len(COLUMNS) - 1) * COL_GAP + 40
    titles = [(LEFT + c * (BOX_W + COL_GAP) + BOX_W // 2, TITLES[k])
              for c, k in enumerate(COLUMNS)]
    return Diagram(width, height, list(boxes.values()), arrows, titles)


def _path(source: Box, target: Box) -> str:
    """An SVG path from ``source`` to ``target``."""
    sy, ty = source.y + BOX_H // 2, target.y + BOX_H // 2
    if target.x > source.x:  # to a column on the right: a gentle S curve
        sx, tx = source.x + BOX_W, target.x - 4
        middle = (sx + tx) // 2
        return f"M{sx},{sy} C{middle},{sy} {middle},{ty} {tx},{ty}"
    sx, tx = source.x + BOX_W, target.x + BOX_W + 4  # same column (or back): loop right
    bulge = max(sx, tx) + 40
    return f"M{sx},{sy} C{bulge},{sy} {bulge},{ty} {tx},{ty}"
