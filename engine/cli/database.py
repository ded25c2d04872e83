"""``encore db``: the database's tables created or upgraded, copied, backed up."""
from __future__ import annotations

import click

from engine.cli.backup import backup as backup_command
from engine.cli.context import Context, pass_ctx
from engine.cli.lazy import lazy_module
from engine.store.url import checked_url, missing_sqlite_file, safe_url

migrate = lazy_module("engine.store.migrate")  # on first use: engine.cli.commands says why


def warn_lost_file(url: str) -> None:
    """A line on stderr when a process (a daemon) still writes into an SQLite file that was
    at ``url``'s path and was deleted or replaced there (engine.store.filewatch)."""
    from engine.store.filewatch import lost_file_warning

    warning = lost_file_warning(url)
    if warning is not None:
        click.echo(warning, err=True)


@click.group()
def db() -> None:
    """The database: create or upgrade its tables, back it up."""


@db.command()
@pass_ctx
def upgrade(ctx: Context) -> None:
    """Create or upgrade the tables (Alembic upgrade to head); say which it did."""
    url = ctx.database_url()
    warn_lost_file(url)
    new_file = missing_sqlite_file(checked_url(url))  # connecting creates it
    store = ctx.reachable_store()
    before = migrate.upgrade(store.engine)
    after = migrate.current_revision(store.engine)
    name = safe_url(store.url)
    if new_file:
        click.echo(f"database {name} created, at the latest schema (revision {after})")
    elif before is None:
        click.echo(f"database {name}: Encore's tables created, at the latest schema "
                   f"(revision {after})")
    elif before != after:
        click.echo(f"database {name} upgraded from revision {before} to {after}, the latest "
                   "schema")
    else:
        click.echo(f"database {name} is already at the latest schema (revision {after})")


@db.command("copy")
@click.option("--to", "to_url", required=True, metavar="URL",
              help="the empty database to copy into: sqlite:///PATH or "
                   "postgresql+psycopg://user@host/db")
@click.option("--batch", default=1000, show_default=True, type=click.IntRange(1, 100_000),
              help="rows read and written at once")
@pass_ctx
def copy(ctx: Context, to_url: str, batch: int) -> None:
    """Copy the production's whole database into an empty one (daemons stopped).

    Messages and their bodies, attempts, the event log, users, tokens, saved searches and
    counters, with their ids and times; then each table's rows counted on both sides."""
    from engine.cli.dbcopy import copy_to

    copy_to(ctx, to_url, batch)


db.add_command(backup_command)
