"""The store is the only code that speaks SQL (docs/architecture.md): no module of ``engine``,
``adapters`` or ``operations`` outside ``engine/store`` imports a database library, names one
to import it later, or holds a string of SQL. Every offence is named by file and line."""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "adapters", "operations")
STORE = ROOT / "engine" / "store"
DATABASE_LIBRARIES = ("sqlalchemy", "sqlite3", "psycopg", "psycopg2", "psycopg_pool", "alembic")
# a database library's name as a string: lazy_module("sqlalchemy"), sys.modules["sqlite3"]
# (alembic's logger is quieted by name, which is no import)
LIBRARY_NAME = re.compile(r"^(sqlalchemy|sqlite3|psycopg2?|psycopg_pool)(\.\w+)*$")
SQL = re.compile(
    r"\bSELECT\b.+\bFROM\b|\bINSERT\s+INTO\b|\bUPDATE\s+\S+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\b(CREATE|DROP|ALTER)\s+(TABLE|INDEX)\b|\bPRAGMA\s+\w+", re.DOTALL)


def sql_offences(source: str, name: str) -> Iterator[str]:
    """``name:line: what`` for each import of a database library, each database library's
    name as a string and each string of SQL in the Python ``source``."""
    for node in ast.walk(ast.parse(source, name)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            modules = []
        for module in modules:
            if module.split(".")[0] in DATABASE_LIBRARIES:
                yield f"{where}: imports {module}"
        text = _text(node)
        if text is not None and LIBRARY_NAME.match(text):
            yield f"{where}: names {text} to import"
        elif text is not None and SQL.search(text):
            yield f"{where}: SQL {text.strip()[:60]!r}"


def _text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's, each of its fields as ``?``; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "?"
                       for part in node.values)
    return None


def modules_outside_the_store() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
                  if STORE not in path.parents)


def test_no_module_outside_the_store_speaks_sql() -> None:
    modules = modules_outside_the_store()
    assert len(modules) > 100 and ROOT / "engine" / "cli" / "commands.py" in modules
    offences = [offence for path in modules for offence in sql_offences(
        path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not offences, "SQL outside engine/store:\n" + "\n".join(offences)


def test_each_kind_of_offence_is_found_and_named_by_its_line() -> None:
    planted = '''"""Prose may say select a row from a list."""
import sqlite3
from sqlalchemy.engine import make_url
sa = lazy_module("sqlalchemy")
QUERY = "SELECT id\\n  FROM message_header"
query = f"UPDATE {table} SET status = 'Queued'"
conn.execute("DELETE FROM event_log WHERE id < ?")
logging.getLogger("alembic").setLevel(30)
'''
    assert sorted({o.split(": ", 1)[0] for o in sql_offences(planted, "m.py")}) == [
        "m.py:2", "m.py:3", "m.py:4", "m.py:5", "m.py:6", "m.py:7"]
