"""Routing rules: which target a JSON body goes to (docs/processes.md).

Values compare as JSON does (``true`` never equals ``1``), and nothing in a rule is evaluated
as code. ``matches`` runs on RE2, linear in the text whatever the pattern, so no body can
make a rule backtrack for ever and freeze the daemon (docs/security.md).
"""
from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import re2

OPERATORS = ("equals", "not_equals", "in", "greater_than", "less_than", "matches", "exists")
RULE_KEYS = ("field", "target", *OPERATORS)

_MISSING: Any = object()
Scalar = str | int | float | bool

# characters of a value a ``matches`` rule looks at: it bounds one rule's cost per value
MATCH_PREFIX = 65536


def _regex_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # we report a refused pattern, naming the rule
    return options


_OPTIONS = _regex_options()


@dataclass(frozen=True)
class Rule:
    """One parsed rule; ``index`` is its 0-based position in ``rules``."""

    index: int
    path: tuple[str, ...]
    operator: str
    operand: Any
    target: str

    @property
    def label(self) -> str:
        """``rule 2 (rules[1])``."""
        return rule_label(self.index)

    def matches(self, body: Any) -> bool:
        """True when ``body`` (a decoded JSON value) satisfies this rule."""
        value = lookup(body, self.path)
        if self.operator == "exists":
            return (value is not _MISSING) == self.operand
        if value is _MISSING:
            return False
        return _TESTS[self.operator](value, self.operand)


def rule_label(index: int) -> str:
    return f"rule {index + 1} (rules[{index}])"


def lookup(body: Any, path: Sequence[str]) -> Any:
    """The value at ``path`` in ``body``, or ``_MISSING``."""
    value = body
    for segment in path:
        if isinstance(value, Mapping):
            value = value.get(segment, _MISSING)
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def first_match(rules: Sequence[Rule], body: Any) -> Rule | None:
    """The first rule that ``body`` satisfies, or None."""
    return next((rule for rule in rules if rule.matches(body)), None)


# -- comparisons ---------------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    """JSON equality: booleans only equal booleans; numbers compare by value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    return type(a) is type(b) and a == b


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ordered(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def test(value: Any, operand: Any) -> bool:
        if _is_number(operand):
            return _is_number(value) and compare(value, operand)
        return isinstance(value, str) and compare(value, operand)
    return test


_TESTS: dict[str, Callable[[Any, Any], bool]] = {
    "equals": _same,
    "not_equals": lambda value, operand: not _same(value, operand),
    "in": lambda value, operand: any(_same(value, o) for o in operand),
    "greater_than": _ordered(lambda a, b: a > b),
    "less_than": _ordered(lambda a, b: a < b),
    "matches": lambda value, pattern: isinstance(value, str) and _search(pattern, value),
}


def _search(pattern: Any, value: str) -> bool:
    """RE2 search of the first MATCH_PREFIX characters of ``value`` (lone surrogates pass)."""
    text = value[:MATCH_PREFIX].encode("utf-8", "surrogatepass")
    return pattern.search(text) is not None


# -- parsing -------------------------------------------------------------------------------
def parse_rules(raw: Any) -> tuple[Rule, ...]:
    """Parse the ``rules`` setting; ValueError names the rule and what is wrong."""
    if not isinstance(raw, (list, tuple)):
        raise ValueError("rules must be an array of tables, e.g. "
                         'rules = [{field = "country", equals = "PT", target = "PaymentsPT"}]')
    return tuple(_parse_rule(index, rule) for index, rule in enumerate(raw))


def check_rules(raw: Any) -> list[Any]:
    """``Setting.check`` for ``rules``."""
    parse_rules(raw)
    return list(raw)


def _parse_rule(index: int, raw: Any) -> Rule:
    label = rule_label(index)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{label} must be a table like "
                         '{field = "country", equals = "PT", target = "PaymentsPT"}, '
                         f"got {type(raw).__name__}")
    for key in raw:
        if key not in RULE_KEYS:
            guess = difflib.get_close_matches(str(key), RULE_KEYS, n=1)
            hint = f" Did you mean {guess[0]!r}?" if guess else ""
            raise ValueError(f"{label}: unknown key or operator {key!r}.{hint} A rule has "
                             f"field, target and one of: {', '.join(OPERATORS)}")
    operators = [key for key in OPERATORS if key in raw]
    if len(operators) != 1:
        given = f"{len(operators)} ({', '.join(operators)})" if operators else "none"
        raise ValueError(f"{label}: give exactly one operator, got {given}; "
                         f"operators: {', '.join(OPERATORS)}")
    target = raw.get("target")
    if not isinstance(target, str) or not target:
        raise ValueError(f"{label}: has no target; add target = \"<item name>\"")
    operator = operators[0]
    return Rule(index=index, path=_parse_path(label, raw.get("field")), operator=operator,
                operand=_parse_operand(label, operator, raw[operator]), target=target)


def _parse_path(label: str, field: Any) -> tuple[str, ...]:
    if not isinstance(field, str) or not field:
        raise ValueError(f"{label}: has no field; add field = \"<dotted path in the body>\"")
    path = tuple(field.split("."))
    if any(not segment for segment in path):
        raise ValueError(f"{label}: field {field!r} has an empty segment")
    return path


def _parse_operand(label: str, operator: str, operand: Any) -> Any:
    where = f"{label}: {operator}"
    if operator == "exists":
        if not isinstance(operand, bool):
            raise ValueError(f"{where} must be true or false, got {operand!r}")
        return operand
    if operator == "matches":
        if not isinstance(operand, str):
            raise ValueError(f"{where} must be a regular expression (a string)")
        return _compile(where, operand)
    if operator == "in":
        if not isinstance(operand, (list, tuple)) or not operand:
            raise ValueError(f"{where} must be a non-empty list of values")
        return tuple(_scalar(where, value) for value in operand)
    if operator in ("greater_than", "less_than"):
        if isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
            raise ValueError(f"{where} must be a number or a string, got {operand!r}")
    return _scalar(where, operand)


def _compile(where: str, pattern: str) -> Any:
    """``pattern`` compiled by RE2; ValueError if RE2 cannot run it."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(
            f"{where}: bad regular expression {pattern!r}: {reason}. Rules use RE2 syntax, "
            "which matches in linear time: no backreferences (\\1) and no lookaround "
            "((?=...), (?!...), (?<=...), (?<!...)); \\z, not \\Z, ends the text") from None


def _scalar(where: str, value: Any) -> Scalar:
    if not isinstance(value, (str, int, float, bool)):
        raise ValueError(f"{where}: {value!r} is not a string, number or true/false")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: {value!r} is not a finite number")
    return value
