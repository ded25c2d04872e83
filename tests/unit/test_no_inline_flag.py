"""One stepped runtime (docs/architecture.md, "The daemon's loop"): what differs between real
time and a virtual clock is the runtime and the clock a daemon is given, never a flag. No
identifier, parameter or attribute of ``engine`` is called ``inline`` (or ``inline_*``,
``*_inline``) — ``engine/tools/ensemble`` and ``engine/portal/trace_svg.py`` use the word for
XData and SVG held in a document. And ``engine/testing.py`` patches no production object: it
assigns attributes of its own objects only. Every offence is named by file and line."""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"
EXEMPT = (ENGINE / "tools" / "ensemble", ENGINE / "portal" / "trace_svg.py")
# lower case: a flag or attribute (INLINE_PARSE_BYTES, a constant of the inbound services, is
# about bodies parsed in memory)
FLAG = re.compile(r"^_*inline(_\w*)?$|_inline$")


def _names(node: ast.AST) -> Iterator[str]:
    """The identifiers ``node`` defines or uses: names, parameters, attributes, keywords,
    functions and classes."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, ast.keyword) and node.arg is not None:
        yield node.arg
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name


def flag_offences(source: str, name: str) -> Iterator[str]:
    """``name:line: identifier`` for each identifier of ``source`` that is an inline flag."""
    for node in ast.walk(ast.parse(source, name)):
        for found in _names(node):
            if FLAG.search(found):
                yield f"{name}:{getattr(node, 'lineno', '?')}: {found}"


def patch_offences(source: str, name: str) -> Iterator[str]:
    """``name:line: target`` for each assignment to an attribute of an object other than
    ``self``, and each ``setattr`` call, in ``source``."""
    for node in ast.walk(ast.parse(source, name)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for part in ast.walk(target):
                if (isinstance(part, ast.Attribute)
                        and not (isinstance(part.value, ast.Name) and part.value.id == "self")):
                    yield f"{name}:{node.lineno}: {ast.unparse(part)}"
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"):
            yield f"{name}:{node.lineno}: {ast.unparse(node)}"


def engine_modules() -> list[Path]:
    return sorted(path for path in ENGINE.rglob("*.py")
                  if not any(path == e or e in path.parents for e in EXEMPT))


def test_no_inline_flag_in_the_engine() -> None:
    modules = engine_modules()
    assert ENGINE / "runtime" / "daemon.py" in modules and ENGINE / "testing.py" in modules
    offences = [o for path in modules for o in flag_offences(
        path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not offences, "inline flags:\n" + "\n".join(offences)


def test_the_virtual_daemon_patches_no_production_object() -> None:
    path = ENGINE / "testing.py"
    offences = list(patch_offences(path.read_text(encoding="utf-8"), "engine/testing.py"))
    assert not offences, "attributes set on others' objects:\n" + "\n".join(offences)


def test_each_kind_of_offence_is_found_and_named_by_its_line() -> None:
    planted = '''"""Prose may say inline."""
def start(self, *, inline: bool = False) -> None:
    self.inline = inline
    runner.start(inline_workers=True)
    if daemon.run_inline:
        pass
INLINE_PARSE_BYTES = 1 << 20
'''
    assert sorted({o.split(": ", 1)[0] for o in flag_offences(planted, "m.py")}) == [
        "m.py:2", "m.py:3", "m.py:4", "m.py:5"]
    patched = '''self.deliveries = []
worker.deliver = recording(worker.deliver)
runner.dispatcher.linger = 0.0
setattr(worker, "deliver", recording)
self.daemon.tick = tick
count = 0
'''
    assert sorted(o.split(": ", 1)[0] for o in patch_offences(patched, "m.py")) == [
        "m.py:2", "m.py:3", "m.py:3", "m.py:4", "m.py:5"]
