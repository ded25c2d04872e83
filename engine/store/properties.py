"""Search properties: scalar values at dotted paths of a message's JSON body, copied into the
indexed ``message_property`` table when it is accepted (docs/portal.md). Imports no SQLAlchemy:
``encore send``'s lite intake uses it.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

PropertyRow = tuple[str, str, float | None]  # name, value_text, value_num

MAX_PATHS = 20
MAX_VALUE_TEXT = 200  # the column's width
MAX_LIST_VALUES = 50
PATH_PATTERN = re.compile(r"[A-Za-z0-9_$@-]+(\.[A-Za-z0-9_$@-]+)*")

# inserts on a driver connection (psycopg's placeholders are rewritten by its hot path)
INSERT_SQL = ("INSERT INTO message_property (message_id, name, value_text, value_num) "
              "VALUES (:message_id, :name, :value_text, :value_num)")


def check_paths(value: Any) -> tuple[str, ...]:
    """The ``search_properties`` setting as distinct dotted paths; ValueError if wrong."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of dotted paths such as [\"order\", "
                         f"\"customer.id\"], got {type(value).__name__}")
    if len(value) > MAX_PATHS:
        raise ValueError(f"{len(value)} paths; at most {MAX_PATHS} search properties per item")
    seen: list[str] = []
    for position, path in enumerate(value, start=1):
        if not isinstance(path, str) or not PATH_PATTERN.fullmatch(path):
            raise ValueError(f"entry {position} ({path!r}) is not a dotted path into the JSON "
                             "body: names of letters, digits, _ - $ @ joined by dots, such "
                             "as \"customer.id\" or \"lines.0.sku\"")
        if len(path) > MAX_VALUE_TEXT:
            raise ValueError(f"entry {position} is longer than {MAX_VALUE_TEXT} characters")
        if path in seen:
            raise ValueError(f"entry {position} ({path!r}) is given twice")
        seen.append(path)
    return tuple(seen)


def lookup(document: Any, path: str) -> tuple[bool, Any]:
    """``(found, value)`` at dotted ``path`` in a decoded JSON document."""
    current = document
    for part in path.split("."):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return False, None
    return True, current


def extract(body: str | None, paths: Sequence[str]) -> list[PropertyRow]:
    """The property rows of ``body`` (JSON text) for ``paths``; none when it is not JSON."""
    if not paths or not body:
        return []
    try:
        document = json.loads(body)
    except ValueError:
        return []
    rows: list[PropertyRow] = []
    for path in paths:
        found, value = lookup(document, path)
        if not found:
            continue
        values = value[:MAX_LIST_VALUES] if isinstance(value, list) else [value]
        rows.extend((path, *scalar) for scalar in _scalars(values))
    return rows


def _scalars(values: Iterable[Any]) -> Iterable[tuple[str, float | None]]:
    for value in values:
        if value is None or isinstance(value, (dict, list)):
            continue
        yield as_text(value)[:MAX_VALUE_TEXT], as_number(value)


def as_text(value: Any) -> str:
    """A scalar as ``value_text`` holds it (and as a filter compares it)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def as_number(value: Any) -> float | None:
    """A scalar as ``value_num`` holds it (a number or a numeric string; not a bool), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and value.strip():
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def parameters(message_id: int, rows: Iterable[PropertyRow]) -> list[dict[str, Any]]:
    """The parameter sets of :data:`INSERT_SQL` for ``rows`` of message ``message_id``."""
    return [{"message_id": message_id, "name": name, "value_text": text, "value_num": num}
            for name, text, num in rows]
