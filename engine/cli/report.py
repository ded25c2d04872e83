"""Plain-text and JSON rendering of rows for the command line."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any


def iso(value: datetime | None) -> str:
    return value.isoformat(timespec="milliseconds") if value is not None else "-"


def json_line(row: dict[str, Any]) -> str:
    return json.dumps(row, default=lambda v: iso(v) if isinstance(v, datetime) else str(v),
                      ensure_ascii=False)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, wrap_last: bool = True) -> str:
    """Aligned columns; the last column is left unpadded (it holds free text)."""
    cells = [[_cell(v) for v in row] for row in rows]
    sizes = widths(headers, cells, wrap_last=wrap_last)
    return "\n".join(lines(headers, cells, sizes))


def widths(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
           wrap_last: bool = True) -> list[int]:
    """The width of each column of :func:`table`, read from ``rows`` one at a time (a
    listing too long to hold reads its rows twice: once for this, once to print them)."""
    sizes = [len(h) for h in headers]
    for row in rows:
        for i, value in enumerate(row[:-1] if wrap_last else row):
            sizes[i] = max(sizes[i], len(_cell(value)))
    return sizes


def lines(headers: Sequence[str], rows: Iterable[Sequence[Any]],
          sizes: Sequence[int]) -> Iterator[str]:
    """The lines of :func:`table` with the column ``sizes`` of :func:`widths`, one at a time:
    the headers, then a line per row."""
    yield _line(headers, sizes)
    for row in rows:
        yield _line([_cell(v) for v in row], sizes)


def _line(values: Sequence[str], widths: Sequence[int]) -> str:
    parts = [v.ljust(widths[i]) for i, v in enumerate(values[:-1])]
    return "  ".join([*parts, values[-1]]).rstrip()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value).replace("\n", " ")
