"""The example body the Testing Service offers for an item (docs/portal.md), built from its
request class, its WSDL's first operation, or a router's first satisfiable rule."""
from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Sequence
from typing import Any

from engine.config.rules import Rule
from engine.message import JsonMessage

EMPTY: dict[type, Any] = {str: "", int: 0, float: 0.0, bool: False, dict: {}, list: []}


def example_body(request_class: type | None, operations: Sequence[str] = (),
                 rules: Sequence[Rule] = ()) -> str:
    """A JSON text that the item's request class accepts; for an open JSON object, one that
    one of ``rules`` routes, else ``{}``."""
    if request_class is None or issubclass(request_class, JsonMessage) or \
            not dataclasses.is_dataclass(request_class):
        routed = next((b for b in map(_routed_by, rules) if b is not None), {})
        return json.dumps(routed, indent=2)
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


def _routed_by(rule: Rule) -> dict[str, Any] | None:
    """A body ``rule`` matches, built from its operand; None when no plain value does."""
    if any(part.isdigit() for part in rule.path):
        return None  # a list index: no example
    operand = rule.operand
    candidates = {"equals": operand, "exists": "", "matches": ""}
    if rule.operator == "in" and isinstance(operand, (list, tuple)) and operand:
        candidates["in"] = operand[0]
    if isinstance(operand, (int, float)) and not isinstance(operand, bool):
        candidates.update(greater_than=operand + 1, less_than=operand - 1)
    if rule.operator not in candidates:
        return None
    value = candidates[rule.operator]
    body: dict[str, Any] = {}
    here = body
    for part in rule.path[:-1]:
        here = here.setdefault(part, {})
    here[rule.path[-1]] = value
    return body if rule.matches(body) else None
