"""One vocabulary for a message's fate: outside the store's SQL (``engine/store``), product code
names a message's status by its :class:`~engine.store.statuses.Status` member, never by a
quoted string, so that a status is spelled once and a typo fails where it is written.

The scan reads every module of ``engine``, ``adapters`` and ``operations`` and reports each
string constant whose whole text is a status (``"Completed"``; prose that mentions one, such
as ``"message ended Completed"``, is not a status). ``Error`` is also an event type (the
``event_log.type`` column): a constant ``"Error"`` is an event type, not reported, where it is
the type given to a call that writes an event, compared with or passed as a ``type``, or
listed among the other event types. The portal's templates are held to the same rule inside
their Jinja tags, where ``Status`` is a global.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from engine.store.models import EVENT_TYPES
from engine.store.statuses import MESSAGE_STATUSES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "adapters", "operations")
STORE = ROOT / "engine" / "store"
TEMPLATES = ROOT / "engine" / "portal" / "templates"

# the calls that take an event's type as their first argument (EventLog.write, a host's
# log_event and _log, the lifecycle's and the readiness check's writers)
EVENT_WRITERS = frozenset({"write", "_write", "log_event", "_log"})
# the event types that are not also a status: one of them beside "Error" makes a list of types
OTHER_EVENT_TYPES = frozenset(EVENT_TYPES) - frozenset(MESSAGE_STATUSES)


def status_literals(source: str) -> Iterator[tuple[int, str]]:
    """(line, status) for each quoted status in ``source`` that is not an event type."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and node.value in MESSAGE_STATUSES
                and not (node.value in EVENT_TYPES and _event_type(node, parents))):
            yield node.lineno, node.value


def _event_type(node: ast.Constant, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    if isinstance(parent, ast.Call):
        return bool(parent.args) and parent.args[0] is node and _name(parent.func) in EVENT_WRITERS
    if isinstance(parent, ast.keyword):
        return parent.arg in ("type", "type_")
    if isinstance(parent, ast.Compare):
        return any(_names_type(side) for side in (parent.left, *parent.comparators))
    if isinstance(parent, (ast.List, ast.Tuple, ast.Set)):
        return _lists_event_types(parent.elts)
    if isinstance(parent, ast.Dict):
        return _lists_event_types(parent.keys)
    return False


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _names_type(node: ast.AST) -> bool:
    """True for ``type``, ``type_``, ``x.type`` and ``x["type"]``."""
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and key.value == "type"
    return _name(node) in ("type", "type_")


def _lists_event_types(elements: list[ast.expr | None]) -> bool:
    return any(isinstance(e, ast.Constant) and e.value in OTHER_EVENT_TYPES for e in elements)


def product_modules() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not path.is_relative_to(STORE):
                yield path


def test_no_product_code_outside_the_store_quotes_a_message_status() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}: {status!r} (use Status.{status.upper()})"
             for path in product_modules()
             for line, status in status_literals(path.read_text(encoding="utf-8"))]
    assert not found, "message statuses quoted, not named by Status:\n" + "\n".join(found)


def template_status_literals(text: str) -> Iterator[tuple[int, str]]:
    """(line, status) for each quoted status inside a Jinja tag or expression of ``text``
    (the page's own words around them are prose)."""
    for tag in re.finditer(r"{%.*?%}|{{.*?}}", text, re.DOTALL):
        for quoted in re.finditer(r"""(["'])(\w+)\1""", tag.group()):
            if quoted.group(2) in MESSAGE_STATUSES:
                yield text.count("\n", 0, tag.start() + quoted.start()) + 1, quoted.group(2)


def test_no_portal_template_quotes_a_message_status() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}: {status!r} (use Status.{status.upper()})"
             for path in sorted(TEMPLATES.rglob("*.html"))
             for line, status in template_status_literals(path.read_text(encoding="utf-8"))]
    assert not found, "message statuses quoted in templates:\n" + "\n".join(found)


def test_the_scan_reports_a_quoted_status_and_its_line() -> None:
    source = 'ok = row.status == "Completed"\nrow = {"status": "Queued"}\nfinish(status="Error")\n'
    assert sorted(status_literals(source)) == [(1, "Completed"), (2, "Queued"), (3, "Error")]


def test_the_scan_leaves_event_types_and_prose_alone() -> None:
    source = ('events.write("Error", text)\n'
              'host.log_event("Error", text, method="on_give_up")\n'
              'if event["type"] == "Error": pass\n'
              'queries.EventFilter(type="Error")\n'
              'TYPES = ["Assert", "Error", "Warning"]\n'
              'COLOURS = {"Error": 1, "Alert": 2}\n'
              'text = "message ended Completed"\n')
    assert list(status_literals(source)) == []


def test_the_template_scan_reports_a_quoted_status_in_a_tag_only() -> None:
    text = "<h1>Suspended</h1>\n{% if m.status == 'Queued' %}\n{{ 'Error' if x }}\n"
    assert list(template_status_literals(text)) == [(2, "Queued"), (3, "Error")]
