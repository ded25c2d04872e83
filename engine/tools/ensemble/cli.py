"""``encore import``: productions from other engines (``encore import ensemble``)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from engine.tools.ensemble.importer import defaults_path, import_production, report_path

__all__ = ["import_group"]


@click.group("import")
def import_group() -> None:
    """Import a production from another engine: `encore import ensemble SOURCE`."""


@import_group.command("ensemble")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False),
              default=Path("production.toml"), show_default=True,
              help="the production file to write; skeletons and the report go beside it")
@click.option("--name", "name", default=None, metavar="NAME",
              help="the production (its class or Name) when the source holds several")
@click.option("--defaults", "defaults", type=click.Path(path_type=Path, dir_okay=False),
              default=None, metavar="FILE",
              help="an exported Ens.Config.DefaultSettings table (XML), written as the "
                   "defaults file <output stem>.defaults.toml beside the output")
@click.option("--force", is_flag=True, help="overwrite files that exist")
def ensemble(source: Path, output: Path, name: str | None, defaults: Path | None,
             force: bool) -> None:
    """Read an Ensemble production (a UDL .cls, an XML export, a <Production> document or
    a directory of them) into a production file, skeletons for the classes Encore has no
    equivalent of, and a report of what became of every setting. Exit status 0 only when
    everything mapped."""
    result = import_production(source, name=name, output=output, defaults=defaults)
    result.write(output, force=force)
    click.echo(result.report.text(), nl=False)
    written = f", {defaults_path(output)}" if result.defaults_text is not None else ""
    click.echo(f"wrote {output}{written}, {report_path(output)}"
               + (f" and {len(result.skeletons)} skeleton file(s) in "
                  f"{output.parent / result.package}" if result.skeletons else ""), err=True)
    sys.exit(0 if result.report.complete else 1)
