"""Writing the production file: the TOML values the importer produces (strings, numbers,
booleans, lists and inline tables of them), every string escaped as TOML requires, and
comments cut at every line break."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}


def value(v: Any) -> str:
    """``v`` as a TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{v!r} has no place in a production file")
        return repr(v)
    if isinstance(v, str):
        return '"' + "".join(_ESCAPES.get(c) or _char(c) for c in v) + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} {v!r} as TOML")


def _char(c: str) -> str:
    """A character of a TOML string: as it is when printable, else escaped (a lone
    surrogate, which no TOML string may hold, as U+FFFD)."""
    if 0xD800 <= ord(c) <= 0xDFFF:
        return "\\ufffd"
    if c.isprintable():
        return c
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def key(k: str) -> str:
    """A bare key when TOML allows one, else a quoted key."""
    if k and all(c.isascii() and (c.isalnum() or c in "-_") for c in k):
        return k
    return value(k)


def comment(text: str) -> list[str]:
    """``text`` as ``#`` lines."""
    lines = text.splitlines() or [""]
    return ["# " + "".join(c if c.isprintable() else "?" for c in line) for line in lines]


def table(name: str, values: Mapping[str, Any]) -> list[str]:
    return [f"[{name}]", *(f"{key(k)} = {value(v)}" for k, v in values.items())]
