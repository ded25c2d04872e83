"""The core's orchestrators stay small enough to read (docs/architecture.md, "The package
map"): the daemon, an item's runner and its dispatcher each have at most 25 methods and 500
lines, their work split among collaborators named after what they do (membership, roster,
runtime; group commit). A class that grows past either limit fails here, by name."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_METHODS = 25
MAX_LINES = 500
CORE = {"Daemon": "engine/runtime/daemon.py", "Dispatcher": "engine/delivery/dispatch.py",
        "ItemRunner": "engine/delivery/item.py"}


def class_sizes(source: str, name: str) -> tuple[int, int]:
    """(methods, lines) of class ``name`` in ``source``: the functions defined directly in
    its body (properties included), and its lines from ``class`` to its last statement."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            methods = [n for n in node.body
                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            return len(methods), (node.end_lineno or node.lineno) - node.lineno + 1
    raise AssertionError(f"no class {name}")


def test_the_core_classes_and_their_modules_stay_small() -> None:
    too_big = []
    for name, module in CORE.items():
        source = (ROOT / module).read_text(encoding="utf-8")
        methods, lines = class_sizes(source, name)
        module_lines = len(source.splitlines())
        if methods > MAX_METHODS or lines > MAX_LINES or module_lines > MAX_LINES:
            too_big.append(f"{module}: {name} has {methods} methods and {lines} lines "
                           f"(its module {module_lines})")
    assert not too_big, f"over {MAX_METHODS} methods or {MAX_LINES} lines:\n" + "\n".join(too_big)


def test_methods_and_lines_are_counted() -> None:
    source = '''class A:
    x = 1

    def f(self) -> None:
        def inner() -> None: ...

    @property
    def g(self) -> int:
        return 1

    async def h(self) -> None: ...
'''
    assert class_sizes(source, "A") == (3, 11)
