"""Text from servers, made storable on every database (docs/security.md): NUL and lone
surrogates, which drivers refuse, are written as their escapes."""
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
    """``text`` with each NUL as ``\\u0000`` and each lone surrogate as ``\\udXXX``; None
    stays None."""
    if text is None or (text.isascii() and "\x00" not in text):
        return text
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(_escape, text)
