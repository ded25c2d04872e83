"""A routing rule class (``XData RuleDefinition``) as the router's ``rules`` and
``default_target``.

Encore's rules (engine.config.rules) test one field of the JSON body each; so only Ensemble
rules of that shape are read: ``<when condition="Document.Country=&quot;PT&quot;">`` with one
``<send>`` without a transformation (and a ``<return/>``); ``condition="1"`` in the last rule is
the default target. Anything else — a transformation, two sends, ``&&``/``||``, a function
call, a constraint on the source — is named in the report as having no equivalent.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from engine.tools.ensemble.model import EnsClass
from engine.tools.ensemble.report import MAPPED, NONE, Line
from engine.tools.ensemble.xml_export import parse_xml

_CONDITION = re.compile(r'^\s*(?:Document|Request)\.([\w.]+)\s*(=|!=|>|<)\s*'
                        r'("(?:[^"]|"")*"|-?\d+(?:\.\d+)?)\s*$')
_OPERATORS = {"=": "equals", "!=": "not_equals", ">": "greater_than", "<": "less_than"}


@dataclass
class RouterRules:
    """What a rule class gives the router, and a report line per rule."""

    rules: list[dict[str, Any]] = field(default_factory=list)
    default_target: str = ""
    lines: list[Line] = field(default_factory=list)


def router_rules(cls: EnsClass) -> RouterRules:
    """The rules of rule class ``cls`` that Encore's router can hold (see the module doc)."""
    out = RouterRules()
    text = cls.xdata.get("RuleDefinition")
    if text is None:
        out.lines.append(Line(NONE, f"rule class {cls.name}", "has no XData RuleDefinition"))
        return out
    root = parse_xml(text.strip().encode("utf-8"), f"rule class {cls.name}")
    rule_sets = root.findall("{*}ruleSet")
    if len(rule_sets) != 1:
        out.lines.append(Line(NONE, f"rule class {cls.name}", f"{len(rule_sets)} rule sets "
                              "(effective dates): Encore's router has one list of rules"))
    rules = rule_sets[0].findall("{*}rule") if rule_sets else []
    for number, rule in enumerate(rules, start=1):
        _read_rule(rule, number, number == len(rules), out)
    return out


def _read_rule(rule: etree._Element, number: int, last: bool, out: RouterRules) -> None:
    label = f"rule {number}" + (f" {rule.get('name')!r}" if rule.get("name") else "")
    if rule.get("disabled", "false").lower() == "true":
        out.lines.append(Line(MAPPED, label, "disabled in Ensemble: left out"))
        return
    if rule.findall("{*}constraint"):
        out.lines.append(Line(NONE, label, "a constraint on the source or document type: "
                              "Encore's rules test the body only"))
        return
    whens = rule.findall("{*}when")
    sends = whens[0].findall("{*}send") if len(whens) == 1 else []
    if len(whens) != 1 or len(sends) != 1 or sends[0].get("transform"):
        out.lines.append(Line(NONE, label, "not one <when> with one <send> without a "
                              "transformation: write it as Encore rules by hand"))
        return
    condition, target = whens[0].get("condition", "").strip(), sends[0].get("target", "")
    if condition == "1" and last:
        out.default_target = target
        out.lines.append(Line(MAPPED, label, f"always → default_target = {target!r}"))
        return
    found = _CONDITION.match(condition)
    if found is None:
        out.lines.append(Line(NONE, label, f"condition {condition!r}: Encore's rules test "
                              "one field with =, !=, > or <"))
        return
    path, operator, literal = found.groups()
    value: Any = (literal[1:-1].replace('""', '"') if literal.startswith('"')
                  else float(literal) if "." in literal else int(literal))
    out.rules.append({"field": path, _OPERATORS[operator]: value, "target": target})
    out.lines.append(Line(MAPPED, label, f"{condition} → {{field = {path!r}, "
                          f"{_OPERATORS[operator]} = {value!r}, target = {target!r}}}"))
