"""The ``encore`` command line (docs/operating.md): the group, which turns Encore's own errors
into one line and imports the heavier commands only when they run, and the registry of every
command, each defined in the module of its subject."""
from __future__ import annotations

import logging
import pkgutil
import sys
from typing import Any

import click

from engine.cli import listing, send, status
from engine.cli.context import Context
from engine.cli.database import db
from engine.cli.operator import register as register_operator_commands
from engine.cli.run import run
from engine.errors import EncoreError, StoreError
from engine.store.opening import first_line, is_database_error

# The commands import the store's modules that need SQLAlchemy (and Alembic) through
# engine.cli.lazy, on first use: `encore send` never needs SQLAlchemy (engine.store.lite), and
# every other command on an SQLite file pays for it only when it reads the database.

# Commands imported only when they run (they bring the daemon, adapters, HTTP and SOAP
# stacks): name → ("module:attribute", the summary `encore --help` shows without importing).
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("engine.cli.check:check",
              "Load the production as `encore run` would and say what would fail (exit 1)."),
    "demo": ("engine.tools.demo:demo",
             "Play the Ensemble timeout scenario (÷10) live against a loopback SOAP "
             "service, and leave its production file, demo.toml, beside the database."),
    "import": ("engine.tools.ensemble.cli:import_group",
               "Import a production from another engine: `encore import ensemble SOURCE`."),
    "reload": ("engine.cli.reload:reload", "Reload the production file in the daemons "
               "running it on this host (SIGHUP) and say what each did: reloaded, or "
               "refused and why."),
    "simulate": ("engine.tools.simulate:simulate_command",
                 "Print the retry timeline the engine produces, on a virtual clock, at once."),
    "portal": ("engine.portal.cli:portal", "Serve the management portal and JSON API from "
               "the production's database (no daemon needed)."),
    "user": ("engine.portal.cli:user",
             "Portal users: viewers read, operators also act, admins also manage users."),
    "token": ("engine.portal.cli:token",
              "API tokens: senders submit messages, viewers read, operators also act."),
}


class EncoreGroup(click.Group):
    """Turns Encore's own errors into one clear line and exit status 1, and imports the
    :data:`LAZY_COMMANDS` only when one of them runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            self.add_command(pkgutil.resolve_name(LAZY_COMMANDS[cmd_name][0]), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``: a lazy command by its summary, not imported."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            command = self.commands.get(name)
            if command is None:  # a stand-in that only knows the summary
                command = click.Command(name, help=LAZY_COMMANDS[name][1])
            if not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.BadParameter as exc:  # a value, not the usage: one line, exit 2
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except StoreError as exc:  # the first line: no SQL statement, no parameters
            click.echo(f"error: {first_line(exc)}", err=True)
            sys.exit(1)
        except EncoreError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except Exception as exc:
            if not is_database_error(exc):
                raise
            # a store path that did not translate its error
            click.echo(f"error: database error: {first_line(exc)}", err=True)
            sys.exit(1)


@click.group(cls=EncoreGroup)
@click.option("-p", "--production", "production", metavar="PATH",
              help="production file (default: $ENCORE_PRODUCTION, else ./production.toml)")
@click.option("-v", "--verbose", is_flag=True, help="log debug detail to stderr")
@click.pass_context
def main(ctx: click.Context, production: str | None, verbose: bool) -> None:
    """Encore: call SOAP and HTTP services reliably from a long-running daemon."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("alembic", "apscheduler"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    ctx.obj = Context(production)


for command in (run, send.send, listing.log_command, listing.messages, listing.show,
                listing.trace, status.status, db):
    main.add_command(command)
register_operator_commands(main)

if __name__ == "__main__":  # pragma: no cover
    main()
