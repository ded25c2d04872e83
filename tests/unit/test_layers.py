"""The shape of the code base: no import cycles, no imports of other modules' private names,
and the layer contracts of pyproject.toml's ``[tool.importlinter]``.

The import graph is grimp's (import-linter's) over ``engine``, ``adapters`` and
``operations``: imports inside functions and under ``TYPE_CHECKING`` count, as they are
dependencies too. A cycle is a strongly connected component of that graph; the test names
each one it finds by a chain of imports that goes round it, with the line of each import.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "adapters", "operations")

# Cycles and private imports that are known and allowed: none. A new one fails the tests below;
# list it here only with the reason it cannot be broken.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()
KNOWN_PRIVATE_IMPORTS: frozenset[tuple[str, str, str]] = frozenset()


@pytest.fixture(scope="module")
def graph() -> Any:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def strongly_connected(graph: Any) -> list[frozenset[str]]:
    """The components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(
                        graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def round_trip(graph: Any, component: frozenset[str]) -> str:
    """The shortest chain of imports from the component's first module back to it, each
    import with its line in the importing module: ``a -> b (l.12) -> a (l.30)`` (a imports b
    at its line 12, b imports a at its line 30)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth first, inside the component
        following = []
        for module in frontier:
            imported = graph.find_modules_directly_imported_by(module) & component
            if start in imported:
                chain = [module]
                while chain[-1] != start:
                    chain.append(came_from[chain[-1]])
                chain = [*reversed(chain), start]
                return " -> ".join([start, *(f"{b} (l.{_line(graph, a, b)})"
                                             for a, b in zip(chain, chain[1:]))])
            for other in sorted(imported - came_from.keys()):
                came_from[other] = module
                following.append(other)
        frontier = following
    raise AssertionError(f"no way round {sorted(component)}")


def _line(graph: Any, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    return ",".join(str(d["line_number"]) for d in details) or "?"


def test_no_module_takes_part_in_an_import_cycle(graph: Any) -> None:
    cycles = strongly_connected(graph)
    new = [round_trip(graph, c) + f"   [{len(c)} modules: {', '.join(sorted(c))}]"
           for c in cycles if c not in KNOWN_CYCLES]
    assert not new, "import cycles:\n" + "\n".join(new)
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert not gone, f"no longer cycles, remove them from KNOWN_CYCLES: {gone}"


def private_imports() -> Iterator[tuple[str, str, str, int]]:
    """``from module import _name`` in the packages: (importer, module, name, line)."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            importer = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                module = "." * node.level + (node.module or "")
                for alias in node.names:
                    name = alias.name
                    if name.startswith("_") and not (name.startswith("__")
                                                     and name.endswith("__")):
                        yield importer, module, name, node.lineno


def test_no_module_imports_a_private_name_of_another() -> None:
    found = list(private_imports())
    new = [f"{importer} (l.{line}): from {module} import {name}"
           for importer, module, name, line in found
           if (importer, module, name) not in KNOWN_PRIVATE_IMPORTS]
    assert not new, "private names imported from other modules:\n" + "\n".join(new)
    gone = sorted(KNOWN_PRIVATE_IMPORTS - {(i, m, n) for i, m, n, _ in found})
    assert not gone, f"no longer imported, remove them from KNOWN_PRIVATE_IMPORTS: {gone}"


def test_the_layer_contracts_of_pyproject_are_kept() -> None:
    # In a process of its own: import-linter's command configures logging with dictConfig,
    # which disables every logger that exists (the engine's, in this test worker) for good.
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), str(ROOT / "pyproject.toml"),
         "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
