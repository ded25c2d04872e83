"""Where an item's settings came from, and how their values may be shown (secrets never)."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from adapters.urls import redact_userinfo

__all__ = ["CLASS_DEFAULT", "SECRET_WORDS", "given_settings", "shown_value"]

CLASS_DEFAULT = "class default"
SECRET_WORDS = ("password", "secret", "token", "api_key", "apikey", "authorization")


def shown_value(name: str, value: Any) -> Any:
    """``value`` of setting ``name`` as it may be shown: secrets hidden, user:password@ out
    of URLs."""
    lowered = name.lower()
    if any(word in lowered for word in SECRET_WORDS) and value:
        return "(secret)"
    if isinstance(value, str):
        return redact_userinfo(value)
    if isinstance(value, (list, tuple)):
        return [shown_value(name, v) for v in value]
    if isinstance(value, dict):
        return {k: shown_value(str(k), v) for k, v in value.items()}
    return value


def given_settings(settings: Mapping[str, Any],
                   sources: Mapping[str, str]) -> Iterator[tuple[str, Any, str]]:
    """``(name, shown value, source)`` of each setting not from its class."""
    for name, source in sources.items():
        if source != CLASS_DEFAULT:
            yield name, shown_value(name, settings.get(name)), source
