"""Saved searches of the Message Viewer (``saved_search``, docs/portal.md)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from engine.errors import OperatorError
from engine.store.models import saved_search
from engine.store.queries import plain
from engine.store.sql import SqlStore

MAX_SAVED_QUERY = 4000  # characters of a saved search's query string


def saved_searches(store: SqlStore, user: str) -> list[dict[str, Any]]:
    """User ``user``'s saved searches by name: id, name, query."""
    s = saved_search.c
    with store.db.read() as conn:
        return [plain(r) for r in conn.execute(
            select(s.id, s.name, s.query).where(s.user_name == user).order_by(s.name))
            .mappings()]


def save_search(store: SqlStore, user: str, name: str, query: str, *, now: datetime) -> None:
    """Save (or replace) ``user``'s search ``name`` as ``query`` (a query string)."""
    if not name.strip() or len(name) > 200:
        raise OperatorError("a saved search needs a name of 1 to 200 characters")
    if len(query) > MAX_SAVED_QUERY:
        raise OperatorError(f"the query is longer than {MAX_SAVED_QUERY} characters")
    s = saved_search.c
    with store.db.tx() as conn:
        conn.execute(saved_search.delete().where(s.user_name == user, s.name == name.strip()))
        conn.execute(saved_search.insert().values(user_name=user, name=name.strip(),
                                                  query=query, created_at=now))


def delete_search(store: SqlStore, user: str, search_id: int) -> str:
    """Delete ``user``'s saved search ``search_id``; its name. OperatorError if not theirs."""
    s = saved_search.c
    with store.db.tx() as conn:
        name = conn.execute(select(s.name).where(s.id == search_id, s.user_name == user)
                            ).scalar()
        if name is None:
            raise OperatorError(f"you have no saved search {search_id}")
        conn.execute(saved_search.delete().where(s.id == search_id))
    return str(name)
