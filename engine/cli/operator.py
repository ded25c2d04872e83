"""Operator commands: resend, suspend, discard, suspended, enable, disable, purge;
``register(main)`` adds them to the ``encore`` group."""
from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

import click

from engine.cli import report
from engine.cli.lazy import lazy_module
from engine.cli.params import ROW_ID
from engine.clock import utcnow
from engine.config.production import ProductionOutline

if TYPE_CHECKING:
    from engine.store.sql import SqlStore

operator = lazy_module("engine.store.operator")  # SQLAlchemy: only when a command runs

_DURATION = re.compile(r"^\s*(\d+)\s*([dhm])\s*$")
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60}
MAX_AGE = timedelta(days=36500)  # a century: older cut-offs reach back towards the year 1


class OperatorContext(Protocol):
    """What these commands need of the group's context object (``engine.cli.context.Context``)."""

    @property
    def store(self) -> SqlStore: ...

    @property
    def outline(self) -> ProductionOutline: ...


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h`` or ``90m`` as a timedelta, at most :data:`MAX_AGE`; ValueError for
    anything else."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: use a whole number of days, hours or "
                         "minutes such as 30d, 12h or 90m")
    seconds = int(match[1]) * _UNIT_SECONDS[match[2]]
    if seconds > MAX_AGE.total_seconds():
        raise ValueError(f"{text!r} is too long: at most {MAX_AGE.days}d")
    return timedelta(seconds=seconds)


def _known_items(ctx: OperatorContext) -> list[str]:
    return [entry.name for entry in ctx.outline.entries]


@click.command()
@click.argument("message_id", type=ROW_ID, metavar="ID")
@click.option("--target", metavar="ITEM", help="send the copy to this item instead")
@click.pass_obj
def resend(ctx: OperatorContext, message_id: int, target: str | None) -> None:
    """Queue a copy of finished or suspended request ID; print the new message's id."""
    new_id = operator.resend(ctx.store, message_id, target=target,
                             known_items=_known_items(ctx), now=utcnow())
    click.echo(new_id)


@click.command()
@click.argument("message_id", type=ROW_ID, metavar="ID")
@click.pass_obj
def suspend(ctx: OperatorContext, message_id: int) -> None:
    """Suspend queued message ID: no worker takes it until it is resent or discarded."""
    operator.suspend(ctx.store, message_id, now=utcnow())
    click.echo(f"message {message_id} suspended")


@click.command()
@click.argument("message_id", type=ROW_ID, metavar="ID")
@click.pass_obj
def discard(ctx: OperatorContext, message_id: int) -> None:
    """Discard queued or suspended message ID: it is never delivered."""
    operator.discard(ctx.store, message_id, now=utcnow())
    click.echo(f"message {message_id} discarded")


@click.command()
@click.option("--item", help="only messages for this item")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@click.pass_obj
def suspended(ctx: OperatorContext, item: str | None, as_json: bool) -> None:
    """List suspended messages, oldest first."""
    rows = operator.suspended_messages(ctx.store, item=item)
    if as_json:
        for row in rows:
            click.echo(report.json_line(row))
        return
    if not rows:
        click.echo("no suspended messages")
        return
    click.echo(report.table(
        ("id", "session", "target", "attempts", "suspended (UTC)", "error"),
        [(r["id"], r["session_id"], r["target"], r["attempts"], r["suspended_at"],
          r["error_text"]) for r in rows]))


@click.command()
@click.argument("item", metavar="ITEM")
@click.pass_obj
def enable(ctx: OperatorContext, item: str) -> None:
    """Let ITEM take messages again."""
    operator.enable_item(ctx.store, item, known_items=_known_items(ctx), now=utcnow())
    click.echo(f"item {item} enabled")


@click.command()
@click.argument("item", metavar="ITEM")
@click.option("--reason", metavar="TEXT",
              help="why (kept with the item's state and in the event log)")
@click.pass_obj
def disable(ctx: OperatorContext, item: str, reason: str | None) -> None:
    """Stop ITEM taking messages; they stay queued. Attempts in flight finish."""
    operator.disable_item(ctx.store, item, reason=reason, known_items=_known_items(ctx),
                          now=utcnow())
    click.echo(f"item {item} disabled")


@click.command()
@click.option("--older-than", "older_than", required=True, metavar="AGE",
              help="30d, 12h or 90m: finished messages that ended longer ago than this")
@click.option("--dry-run", is_flag=True, help="count what would be deleted; delete nothing")
@click.pass_obj
def purge(ctx: OperatorContext, older_than: str, dry_run: bool) -> None:
    """Delete finished messages (with their responses, attempts and events) and events
    older than AGE. Queued, delivered and suspended messages are kept."""
    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from exc
    counts = operator.purge(ctx.store, age, utcnow(), dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {counts} older than {older_than}")


COMMANDS = (resend, suspend, discard, suspended, enable, disable, purge)


def register(main: click.Group) -> None:
    """Add the operator commands to the ``encore`` group."""
    for command in COMMANDS:
        main.add_command(command)
