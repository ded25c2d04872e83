"""Text from servers, made storable on every database (docs/security.md: "values from servers are
data, never a crash").

A server's error text, reason phrase or body may hold characters no database driver takes:
a NUL byte (PostgreSQL's ``text`` refuses it) and lone surrogates (``"\\ud800"``, which
neither psycopg nor sqlite3 can encode as UTF-8). :func:`storable` is applied where the store
writes such text; it keeps every other character exactly, and shows the two kinds
literally as their escapes, the same on PostgreSQL and SQLite.
"""
from __future__ import annotations

import re
from typing import overload

__all__ = ["storable"]

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


@overload
def storable(text: str) -> str: ...
@overload
def storable(text: None) -> None: ...


def storable(text: str | None) -> str | None:
    """``text`` as the database can hold it: each NUL becomes the six characters
    ``\\u0000``, each lone surrogate ``\\udXXX``; everything else is unchanged (None stays
    None). Ordinary text costs one scan in C: ASCII without a NUL is returned as it is."""
    if text is None or (text.isascii() and "\x00" not in text):
        return text
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(_escape, text)
