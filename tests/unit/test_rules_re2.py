"""Router rules on RE2 (issue 22, point 2; docs/security.md "Router rules"): a pattern that makes
Python's backtracking ``re`` run for minutes answers at once, a pattern RE2 cannot run is
refused at load naming the item, the rule and the pattern, and a rule looks at a bounded
prefix of a string only."""
from __future__ import annotations

import time
from typing import Any

import pytest

from engine.config.production import parse_production
from engine.config.rules import MATCH_PREFIX, parse_rules
from engine.errors import ConfigurationError

PRODUCTION = """
[production]
name = "R"
database = "sqlite://"

[[items]]
name = "Router"
class = "engine.router:Router"
[items.settings]
rules = [
  {{field = "country", equals = "PT", target = "Payments"}},
  {{field = "name", matches = '{pattern}', target = "Payments"}},
]

[[items]]
name = "Payments"
class = "tests.unit.sample_ops:StubOperation"
"""


def rule(pattern: str) -> Any:
    (parsed,) = parse_rules([{"field": "text", "matches": pattern, "target": "X"}])
    return parsed


def test_a_catastrophic_pattern_answers_at_once() -> None:
    # Python's re takes about a second for 22 a's here, doubling with each one more: 29 a's
    # and a "!" held the GIL (every thread of the daemon) for minutes
    nested = rule("^(a+)+$")
    started = time.monotonic()
    assert nested.matches({"text": "a" * 29 + "!"}) is False
    assert nested.matches({"text": "a" * 10_000 + "!"}) is False
    assert nested.matches({"text": "a" * 29}) is True
    assert time.monotonic() - started < 5.0  # microseconds, in truth; Python's re: minutes


@pytest.mark.parametrize(("pattern", "why"), [
    (r"(a)\1", r"invalid escape sequence: \1"),  # a backreference
    (r"(?P<x>a)(?P=x)", "invalid perl operator: (?P"),  # a named backreference
    (r"pay(?=ment)", "invalid perl operator: (?="),  # lookahead
    (r"(?<!re)pay", "invalid perl operator: (?<!"),  # negative lookbehind
])
def test_a_pattern_re2_cannot_run_is_refused_at_load_naming_the_rule(pattern: str,
                                                                     why: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_production(PRODUCTION.format(pattern=pattern), env={})
    text = str(raised.value)
    for part in ("item 'Router'", "setting 'rules'", "rule 2 (rules[1])",
                 f"bad regular expression {pattern!r}", why, "RE2", "no backreferences"):
        assert part in text, (part, text)


def test_a_good_pattern_loads_and_routes() -> None:
    production = parse_production(PRODUCTION.format(pattern="^Ana (Silva|Costa)$"), env={})
    assert [item.name for item in production.items] == ["Router", "Payments"]


def test_a_rule_looks_at_a_bounded_prefix_of_a_string() -> None:
    tail = rule("needle")
    assert tail.matches({"text": "x" * (MATCH_PREFIX - 6) + "needle"})  # inside the prefix
    assert not tail.matches({"text": "x" * MATCH_PREFIX + "needle"})  # beyond it
    # a huge value costs no more than its prefix: linear in 64 Ki characters
    huge = "a" * (50 * MATCH_PREFIX)
    started = time.monotonic()
    for _ in range(20):
        rule("^(a|aa)+b").matches({"text": huge})
    assert time.monotonic() - started < 2.0


def test_unicode_and_lone_surrogates_are_matched_without_error() -> None:
    assert rule("^Jo(ã|a)o$").matches({"text": "João"})
    assert rule("^.{4}$").matches({"text": "João"})  # one character each, not bytes
    assert rule("x$").matches({"text": "\ud800x"})  # JSON allows it; encoding must not raise
    assert not rule("y").matches({"text": "\ud800x"})
