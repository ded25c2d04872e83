"""``encore db copy --to URL`` (docs/scale-out.md); refused while a daemon is alive on the
source, which would go on changing rows already copied."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from engine.cli.context import Context
from engine.config.production import absolute_sqlite_url
from engine.errors import StoreError
from engine.store.copy import copy_database, describe, live_daemons, row_counts
from engine.store.opening import open_store
from engine.store.url import safe_url

__all__ = ["copy_to"]


def copy_to(ctx: Context, to_url: str, batch: int) -> None:
    """Copy the database of ``ctx``'s production to ``to_url``, ``batch`` rows at a time,
    with a progress bar; print each table's rows on both sides."""
    source = ctx.store
    alive = live_daemons(source.engine, source.db_now(), ctx.outline.lease_seconds)
    if alive:
        raise StoreError(f"daemons are running on {safe_url(source.url)}: "
                         f"{', '.join(alive)}; stop them (SIGTERM) before copying")
    to_url = absolute_sqlite_url(to_url, Path.cwd())
    if to_url == source.url:
        raise StoreError("--to names the production's own database; name another")
    target = open_store(to_url, need_schema=False)
    try:
        counts = row_counts(source.engine)
        click.echo(f"copying {safe_url(source.url)} to "
                   f"{safe_url(target.url)}: {describe(counts)}", err=True)
        with click.progressbar(length=sum(counts.values()), label="rows", file=sys.stderr,
                               show_pos=True) as bar:
            copied = copy_database(source.engine, target.engine, batch=batch,
                                   progress=lambda _table, rows: bar.update(rows))
    finally:
        target.dispose()
    for table in copied:
        click.echo(f"{table.table}: {table.source} rows, {table.target} on the target")
    click.echo(f"copied {sum(t.target for t in copied)} rows of {len(copied)} tables; every "
               f"table's rows counted on both sides. Point the production's database (or "
               f"ENCORE_DATABASE_URL) at {safe_url(target.url)} and start the "
               "daemons there.")
