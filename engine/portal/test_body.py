"""The example body the Testing Service offers for an item (docs/portal.md): built from the
item's request class — each field with its default, a required one with an empty value of
its type, a field that defaults to None left out — and, for a SOAP operation, the first
operation its WSDL offers as the daemons running it report them.
"""
from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Sequence
from typing import Any

from engine.message import JsonMessage

EMPTY: dict[type, Any] = {str: "", int: 0, float: 0.0, bool: False, dict: {}, list: []}


def example_body(request_class: type | None, operations: Sequence[str] = ()) -> str:
    """A JSON text that the item's request class accepts; ``{}`` for an open JSON object."""
    if request_class is None or issubclass(request_class, JsonMessage) or \
            not dataclasses.is_dataclass(request_class):
        return "{}"
    hints = typing.get_type_hints(request_class)
    example: dict[str, Any] = {}
    for f in dataclasses.fields(request_class):
        value = _value_of(f, hints.get(f.name))
        if value is not None:
            example[f.name] = value
    if operations and "operation" in example:
        example["operation"] = operations[0]
    return json.dumps(example, indent=2)


def _value_of(f: dataclasses.Field[Any], hint: Any) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    origin = typing.get_origin(hint) or hint
    return EMPTY.get(origin, "") if isinstance(origin, type) else ""
