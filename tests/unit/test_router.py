"""The router: its rules, their checks at load time, and routing on a virtual clock."""
from __future__ import annotations

from typing import Any

import pytest

from engine.config.production import parse_production
from engine.config.rules import parse_rules
from engine.errors import ConfigurationError
from engine.store import queries
from engine.store.sql import SqlStore
from engine.testing import VirtualDaemon

BODY = {"country": "PT", "amount": 1500, "vip": True, "ratio": 0.5, "note": None,
        "customer": {"name": "Ana Silva", "tags": ["gold", "early"]},
        "lines": [{"sku": "A-1"}, {"sku": "B-2"}]}


def matches(rule: dict[str, Any], body: Any = BODY) -> bool:
    (parsed,) = parse_rules([{**rule, "target": "X"}])
    return parsed.matches(body)


@pytest.mark.parametrize(("rule", "expected"), [
    # equals on a string
    ({"field": "country", "equals": "PT"}, True),
    ({"field": "country", "equals": "pt"}, False),
    # numbers compare by value, whatever their type
    ({"field": "amount", "equals": 1500.0}, True),
    # true is not 1, and 1 is not true
    ({"field": "vip", "equals": 1}, False),
    ({"field": "amount", "equals": True}, False),
    ({"field": "vip", "equals": True}, True),
    # not_equals; false when the field is missing
    ({"field": "country", "not_equals": "ES"}, True),
    ({"field": "region", "not_equals": "ES"}, False),
    # in a list of values
    ({"field": "country", "in": ["PT", "ES"]}, True),
    ({"field": "country", "in": ["FR", "ES"]}, False),
    # greater_than / less_than on numbers
    ({"field": "amount", "greater_than": 1000}, True),
    ({"field": "amount", "greater_than": 1500}, False),
    ({"field": "ratio", "less_than": 1}, True),
    # a number never compares with a string, nor a string with a number
    ({"field": "country", "greater_than": 10}, False),
    ({"field": "amount", "less_than": "z"}, False),
    # strings compare with strings
    ({"field": "country", "less_than": "ZZ"}, True),
    # matches searches anywhere in the string; anchors make it whole
    ({"field": "customer.name", "matches": "Silva"}, True),
    ({"field": "customer.name", "matches": "^Silva$"}, False),
    # matches never holds for a value that is not a string
    ({"field": "amount", "matches": "15"}, False),
    # a dotted path reaches into objects and, by number, into lists
    ({"field": "lines.1.sku", "equals": "B-2"}, True),
    ({"field": "lines.5.sku", "exists": True}, False),
    ({"field": "customer.tags.0", "equals": "gold"}, True),
    # exists: the path is in the body, even holding null
    ({"field": "note", "exists": True}, True),
    ({"field": "region", "exists": False}, True),
    ({"field": "country.code", "exists": True}, False),
])
def test_each_operator_holds_where_it_should(rule: dict[str, Any], expected: bool) -> None:
    assert matches(rule) is expected


def test_a_body_that_is_not_an_object_matches_only_exists_false() -> None:
    assert not matches({"field": "country", "equals": "PT"}, body=[1, 2])
    assert matches({"field": "country", "exists": False}, body="text")


PRODUCTION = """
[[items]]
name = "Router"
class = "engine.router:Router"
[items.settings]
rules = [
  {{field = "country", equals = "PT", target = "PaymentsPT"}},
  {rule},
]
default_target = "{default}"

[[items]]
name = "PaymentsPT"
class = "tests.unit.sample_ops:StubOperation"

[[items]]
name = "Payments"
class = "tests.unit.sample_ops:StubOperation"

[[items]]
name = "Poller"
class = "engine.service:BusinessService"
[items.settings]
targets = ["Payments"]
"""


def load(rule: str = '{field = "amount", greater_than = 1000, target = "Payments"}',
         default: str = "Payments") -> Any:
    return parse_production(PRODUCTION.format(rule=rule, default=default), env={})


@pytest.mark.parametrize(("rule", "expected"), [
    # an unknown operator, with the closest one suggested
    ('{field = "amount", greater = 1000, target = "Payments"}',
     ["rule 2 (rules[1])", "unknown key or operator 'greater'", "greater_than"]),
    # a rule without a target
    ('{field = "amount", greater_than = 1000}', ["rule 2 (rules[1])", "has no target"]),
    # a bad regular expression
    ('{field = "name", matches = "([a-z]", target = "Payments"}',
     ["rule 2 (rules[1])", "bad regular expression"]),
    # a target that is not an item of the production
    ('{field = "amount", greater_than = 1000, target = "Paymnets"}',
     ["rule 2 (rules[1])", "target 'Paymnets' is not an item of the production",
      "Payments, PaymentsPT"]),
    # a target that does not take messages
    ('{field = "amount", greater_than = 1000, target = "Poller"}',
     ["rule 2 (rules[1])", "does not take messages"]),
    # the router itself
    ('{field = "amount", greater_than = 1000, target = "Router"}',
     ["rule 2 (rules[1])", "is this item itself"]),
    # two operators in one rule
    ('{field = "amount", greater_than = 1, less_than = 9, target = "Payments"}',
     ["rule 2 (rules[1])", "exactly one operator", "greater_than, less_than"]),
    # no operator at all
    ('{field = "amount", target = "Payments"}', ["rule 2 (rules[1])", "got none"]),
    # no field
    ('{equals = "x", target = "Payments"}', ["rule 2 (rules[1])", "has no field"]),
    # an empty path segment
    ('{field = "a..b", exists = true, target = "Payments"}', ["empty segment"]),
    # in needs a list
    ('{field = "country", in = "PT", target = "Payments"}', ["non-empty list"]),
    # exists needs true or false
    ('{field = "country", exists = "yes", target = "Payments"}', ["true or false"]),
    # comparisons need a number or a string
    ('{field = "amount", greater_than = true, target = "Payments"}',
     ["number or a string"]),
    # NaN is no number to compare with
    ('{field = "amount", less_than = nan, target = "Payments"}', ["not a finite number"]),
    # a rule that is not a table
    ('"country = PT"', ["rule 2 (rules[1]) must be a table"]),
])
def test_bad_rules_are_refused_at_load_time_naming_the_item_and_the_rule(
        rule: str, expected: list[str]) -> None:
    with pytest.raises(ConfigurationError) as info:
        load(rule)
    text = str(info.value)
    assert "item 'Router'" in text and "setting 'rules'" in text
    for fragment in expected:
        assert fragment in text


def test_a_default_target_that_is_not_an_item_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="setting 'default_target'.*'Nowhere' is not"):
        load(default="Nowhere")


def test_rules_must_be_an_array_of_tables() -> None:
    text = PRODUCTION.split("[items.settings]")[0] + '[items.settings]\nrules = "x"\n'
    with pytest.raises(ConfigurationError, match="setting 'rules'.*expected list"):
        parse_production(text + PRODUCTION.split('default_target = "{default}"')[1], env={})


def router(store: SqlStore, default: str = "Payments", **rule: Any) -> VirtualDaemon:
    vd = VirtualDaemon(load(default=default), store)
    for name in ("PaymentsPT", "Payments"):
        vd.hosts[name].adapter.script = lambda call, name=name: {"paid_by": name}
    return vd


@pytest.mark.parametrize(("body", "target"), [
    # the first rule
    ({"country": "PT", "amount": 5000}, "PaymentsPT"),
    # the second rule
    ({"country": "ES", "amount": 5000}, "Payments"),
    # no rule: the default target
    ({"country": "ES", "amount": 5}, "Payments"),
])
def test_the_first_matching_rule_wins_and_its_target_answers(
        store: SqlStore, body: dict[str, Any], target: str) -> None:
    vd = router(store)
    mid = vd.send("Router", body)
    vd.run()
    row = store.get_message(mid)
    assert row.status == "Completed"
    response = store.get_message(row.corresponding_id)
    assert response.body == f'{{"answer":{{"paid_by":"{target}"}}}}'
    (sent,) = vd.hosts[target].adapter.calls
    assert sent.payload == body  # forwarded unchanged
    hops = [(m["source"], m["target"]) for m in queries.messages(store, session_id=mid)
            if m["kind"] == "request"]
    assert hops == [("cli", "Router"), ("Router", target)]


def test_without_a_match_or_a_default_target_the_message_ends_in_error(
        store: SqlStore) -> None:
    vd = router(store, default="")
    mid = vd.send("Router", {"country": "ES"})
    vd.run()
    row = store.get_message(mid)
    assert row.status == "Error" and "no rule matched and Router has no default_target" \
        in row.error_text


def test_a_traced_router_writes_which_rule_matched(store: SqlStore) -> None:
    text = load().item("Router")
    assert text.settings["trace"] is False
    prod = parse_production(PRODUCTION.format(
        rule='{field = "amount", greater_than = 1000, target = "Payments"}',
        default="Payments").replace('default_target = "Payments"',
                                    'default_target = "Payments"\ntrace = true'), env={})
    vd = VirtualDaemon(prod, store)
    vd.hosts["Payments"].adapter.script = lambda call: {}
    mid = vd.send("Router", {"amount": 2000})
    vd.run()
    traces = [e["text"] for e in queries.events(store, queries.EventFilter(type="Trace"))
              if e["message_id"] == mid]
    assert "rule 2 (rules[1]) matched: routed to Payments" in traces
