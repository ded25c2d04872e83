"""The Testing Service's example body (docs/portal.md): from the item's request class, a
WSDL's operation, or a router's rules — each one the item would take."""
from __future__ import annotations

import json
from typing import Any

import pytest

from engine.config.rules import parse_rules
from engine.message import JsonMessage
from engine.portal.example_body import example_body
from operations.http import HttpRequest
from operations.soap import SoapRequest
from tests.unit.sample_ops import Ping


@pytest.mark.parametrize("request_class, expected", [
    # every field's default; a field defaulting to None (json, body, body_base64) left out
    (HttpRequest, {"method": "POST", "path": "/", "headers": {}}),
    # a required str empty, a default kept
    (Ping, {"text": "", "count": 1}),
    # an open JSON object without rules
    (JsonMessage, {}),
])
def test_the_example_is_built_from_the_request_class_and_the_class_takes_it(
        request_class: type, expected: dict[str, Any]) -> None:
    text = example_body(request_class)
    assert json.loads(text) == expected
    request_class.from_json(text)  # what `encore send` checks a body with: no MessageError


def test_a_soap_example_names_the_first_operation_the_wsdl_offers() -> None:
    assert json.loads(example_body(SoapRequest, ["echo", "fail"])) == {
        "operation": "echo", "args": {}}


@pytest.mark.parametrize("rules, expected", [
    # a number above the bound, under the path's object
    ([{"field": "json.order", "greater_than": 0, "target": "P"}], {"json": {"order": 1}}),
    # a list index gives no example; the next rule's first listed value does
    ([{"field": "lines.0.sku", "equals": "x", "target": "M"},
      {"field": "country", "in": ["PT", "ES"], "target": "Q"}], {"country": "PT"}),
    # a pattern cannot be satisfied by a guess: no example
    ([{"field": "text", "matches": "^(a+)+$", "target": "M"}], {}),
])
def test_a_router_is_offered_a_body_its_rule_routes(rules: list[dict[str, Any]],
                                                    expected: dict[str, Any]) -> None:
    parsed = parse_rules(rules)
    body = json.loads(example_body(JsonMessage, (), parsed))
    assert body == expected
    if body:
        assert any(rule.matches(body) for rule in parsed)
