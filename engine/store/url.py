"""A database URL as the command line reads and shows it. SQLAlchemy is imported per
function: ``encore send`` imports this module without it."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from engine.errors import StoreError
from engine.store.database import normalise_url

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["URL", "checked_url", "libpq_url", "missing_sqlite_directory",
           "missing_sqlite_file", "parse_url", "safe_url"]


def parse_url(url: str) -> URL:
    """``url`` parsed as it is written; SQLAlchemy's ``ArgumentError`` if it is no URL."""
    from sqlalchemy.engine import make_url

    return make_url(url)


def checked_url(url: str) -> URL:
    """``url`` parsed (libpq's multi-host form too); StoreError, not quoting it, if not."""
    from sqlalchemy.exc import ArgumentError

    try:
        return parse_url(normalise_url(url))
    except (ArgumentError, ValueError) as exc:
        raise StoreError("the database URL (the production file's database, or "
                         "ENCORE_DATABASE_URL) is not a valid SQLAlchemy URL such as "
                         "'sqlite:///encore.db' or 'postgresql://user@host/db'") from exc


def safe_url(url: str) -> str:
    """The database URL without its password."""
    from sqlalchemy.exc import ArgumentError

    for form in (url, normalise_url(url)):
        try:
            return parse_url(form).render_as_string(hide_password=True)
        except (ArgumentError, ValueError):
            continue
    return "(the database URL, which is not a valid SQLAlchemy URL)"


def missing_sqlite_file(parsed: URL) -> bool:
    """True for an SQLite file URL whose file is not there (connecting would create it)."""
    return (parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")
            and not os.path.exists(parsed.database))


def missing_sqlite_directory(parsed: URL) -> str | None:
    """The missing directory of an SQLite file URL, else None."""
    if not missing_sqlite_file(parsed):
        return None
    directory = os.path.dirname(os.path.abspath(str(parsed.database)))
    return None if os.path.isdir(directory) else directory


def libpq_url(parsed: URL) -> str:
    """``parsed`` as pg_dump takes it: no SQLAlchemy driver name, no password."""
    from sqlalchemy.engine import URL

    plain = URL.create(parsed.get_backend_name(), username=parsed.username, host=parsed.host,
                       port=parsed.port, database=parsed.database, query=parsed.query)
    return plain.render_as_string(hide_password=False)
