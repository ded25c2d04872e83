"""``encore db backup PATH``: an online copy of the production's SQLite database, safe while
its daemons run (:mod:`engine.store.backup`, docs/backup.md). A PostgreSQL database is
backed up with PostgreSQL's own tools: the command says which, and exits 1."""
from __future__ import annotations

from typing import Protocol

import click

from engine.errors import StoreError
from engine.store.database import normalise_url, sqlite_file
from engine.store.url import libpq_url, parse_url


class BackupContext(Protocol):
    """What the command needs of the group's context object."""

    def database_url(self) -> str: ...


@click.command()
@click.argument("path", type=click.Path(dir_okay=False, writable=True))
@click.pass_obj
def backup(ctx: BackupContext, path: str) -> None:
    """Copy the production's SQLite database to PATH, a new file, as one consistent
    snapshot — while the daemons run. For PostgreSQL, says to use pg_dump (exit 1)."""
    from engine.store.backup import backup_sqlite

    url = parse_url(normalise_url(ctx.database_url()))
    safe = url.render_as_string(hide_password=True)
    if url.get_backend_name() != "sqlite":
        raise StoreError(
            f"`encore db backup` copies SQLite files; {safe} is a {url.get_backend_name()} "
            f"database: back it up with its own tools, e.g. pg_dump --format=custom "
            f"--file={path} '{libpq_url(url)}' (its password from PGPASSWORD or "
            "~/.pgpass; docs/backup.md)")
    database = sqlite_file(url.render_as_string(hide_password=False))
    if database is None:
        raise StoreError(f"{safe} is not a database file that can be copied")
    done = backup_sqlite(database, path)
    click.echo(f"backup of {safe} written to {done.path} ({done.size:,} bytes, integrity "
               f"check {done.integrity})")

