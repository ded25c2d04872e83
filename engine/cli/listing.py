"""The commands that read messages and events: ``encore log``, ``messages``, ``show`` and
``trace``. A listing shows the newest rows unless told otherwise, and says on stderr how many
older ones it left out."""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from engine.cli import report
from engine.cli.context import Context, pass_ctx
from engine.cli.lazy import lazy_module
from engine.cli.params import COUNT, ROW_ID
from engine.clock import utcnow
from engine.errors import EncoreError
from engine.store.url import safe_url

if TYPE_CHECKING:
    from engine.store.queries import EventFilter
    from engine.store.sql import SqlStore

listings = lazy_module("engine.store.listings")  # on first use: engine.cli.commands says why
queries = lazy_module("engine.store.queries")

EVENT_TYPES = click.Choice(["Assert", "Error", "Warning", "Info", "Trace", "Alert"])
DEFAULT_LIMIT = 50  # rows `encore messages` and `encore log` show without --limit or --all


@click.command("log")
@click.option("--type", "type_", type=EVENT_TYPES, help="only events of this type")
@click.option("--item", help="only events of this item (config name)")
@click.option("--message", "message_id", type=ROW_ID, help="only events of this message")
@click.option("--session", "session_id", type=ROW_ID, help="only events of this session")
@click.option("--lifecycle", is_flag=True,
              help="only the production's life: daemons started and stopped, reloads, "
                   "restarts, items enabled and disabled, dead daemons recovered, leases "
                   "taken and lost, schema upgrades")
@click.option("--since", help="10m, 2h, 3d or an ISO time")
@click.option("--limit", type=COUNT, default=None,
              help=f"only the newest N events (default {DEFAULT_LIMIT})")
@click.option("--all", "show_all", is_flag=True, help="every event, however many")
@click.option("--follow", is_flag=True, help="keep printing new events")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@pass_ctx
def log_command(ctx: Context, type_: str | None, item: str | None, message_id: int | None,
                session_id: int | None, lifecycle: bool, since: str | None, limit: int | None,
                show_all: bool, follow: bool, as_json: bool) -> None:
    """Print the event log, newest last: the newest 50 unless --limit N or --all (stderr
    says how many older ones were left out). With --lifecycle, the daemon that wrote each
    event is shown too."""
    limit = _row_limit(limit, show_all)
    flt = queries.EventFilter(type=type_, item=item, message_id=message_id,
                              session_id=session_id, since=parse_since(since), limit=limit,
                              lifecycle=lifecycle)
    columns, cells = (LIFE_COLUMNS, _life_cells) if lifecycle else (EVENT_COLUMNS, _event_cells)
    if limit is None:  # every one: read a chunk at a time, never all at once
        last = _stream(lambda up_to: queries.iter_events(ctx.store, flt, up_to=up_to),
                       columns, cells, as_json)
        if follow:
            _follow_events(ctx.store, flt, last, as_json)
        return
    rows = queries.events(ctx.store, flt)
    left_out = _left_out(rows, limit, lambda oldest: listings.events_left_out(
        ctx.store, flt, oldest))
    _print_events(rows, as_json, header=True, lifecycle=lifecycle)
    _say_left_out(left_out, len(rows), "event")
    if follow:
        _follow_events(ctx.store, flt, rows[-1]["id"] if rows else 0, as_json)


def _follow_events(store: SqlStore, flt: EventFilter, last_id: int,
                   as_json: bool) -> None:
    """Print events newer than ``last_id`` that match ``flt`` — its ``since`` too, so that
    an empty window does not let the whole history through — every half second."""
    while True:
        time.sleep(0.5)
        rows = queries.events(store, dataclasses.replace(flt, after_id=last_id, limit=None))
        _print_events(rows, as_json, header=last_id == 0,  # nothing printed yet: a header
                      lifecycle=flt.lifecycle)
        last_id = rows[-1]["id"] if rows else last_id


def _print_events(rows: list[dict[str, Any]], as_json: bool, *, header: bool,
                  lifecycle: bool = False) -> None:
    if as_json:
        for row in rows:
            click.echo(report.json_line(row))
        return
    if not rows:
        return
    if lifecycle:  # a daemon's own events have no message: the daemon in its place
        text = report.table(LIFE_COLUMNS, [_life_cells(r) for r in rows])
    else:
        text = report.table(EVENT_COLUMNS, [_event_cells(r) for r in rows])
    click.echo(text if header else "\n".join(text.splitlines()[1:]))
    sys.stdout.flush()


def _row_limit(limit: int | None, show_all: bool) -> int | None:
    """The rows a listing shows: ``--limit N``, None for ``--all``, else :data:`DEFAULT_LIMIT`."""
    if show_all and limit is not None:
        raise click.UsageError("give either --limit N or --all, not both")
    return None if show_all else limit or DEFAULT_LIMIT


def _left_out(rows: list[dict[str, Any]], limit: int | None,
              older: Callable[[int], int]) -> int:
    """How many rows a limited listing left out (0 when it was not full)."""
    if limit is None or len(rows) < limit:
        return 0
    return older(rows[0]["id"])


def _say_left_out(left_out: int, shown: int, noun: str) -> None:
    """One line on stderr (stdout stays the rows alone, for pipes) when rows were left out."""
    def nouns(count: int) -> str:
        return noun if count == 1 else noun + "s"

    if left_out:
        click.echo(f"(the newest {shown} {nouns(shown)} shown; {left_out} older "
                   f"{nouns(left_out)} left out: --limit N or --all shows more)", err=True)


def _json_bodies(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its ``body`` as the JSON value it holds (else the text as it is)."""
    if row.get("body") is None:
        return row
    try:
        return {**row, "body": json.loads(row["body"])}
    except ValueError:
        return row


@click.command()
@click.option("--status", help="only messages in this status")
@click.option("--item", help="only messages for this item")
@click.option("--session", "session_id", type=ROW_ID, help="only messages of this session")
@click.option("--limit", type=COUNT, default=None,
              help=f"only the newest N messages (default {DEFAULT_LIMIT})")
@click.option("--all", "show_all", is_flag=True, help="every message, however many")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per line, the body as JSON")
@pass_ctx
def messages(ctx: Context, status: str | None, item: str | None, session_id: int | None,
             limit: int | None, show_all: bool, as_json: bool) -> None:
    """List message headers, newest last: the newest 50 unless --limit N or --all (stderr
    says how many older ones were left out)."""
    limit = _row_limit(limit, show_all)
    if limit is None:  # every one: read a chunk at a time, never all at once
        def every(up_to: int | None) -> Iterator[dict[str, Any]]:
            return queries.iter_messages(ctx.store, status=status, item=item,
                                         session_id=session_id, up_to=up_to)
        _stream(every, MESSAGE_COLUMNS, _message_cells, as_json, _json_bodies,
                empty_header=True)
        return
    rows = queries.messages(ctx.store, status=status, item=item, session_id=session_id,
                            limit=limit)
    left_out = _left_out(rows, limit, lambda oldest: listings.messages_left_out(
        ctx.store, oldest, status=status, item=item, session_id=session_id))
    if as_json:
        for row in rows:
            click.echo(report.json_line(_json_bodies(row)))
    else:
        click.echo(report.table(MESSAGE_COLUMNS, [_message_cells(r) for r in rows]))
    _say_left_out(left_out, len(rows), "message")


MESSAGE_COLUMNS = ("id", "session", "kind", "target", "status", "attempts", "retry",
                   "next attempt", "created (UTC)", "error")


EVENT_COLUMNS = ("id", "time (UTC)", "type", "item", "message", "text")


LIFE_COLUMNS = ("id", "time (UTC)", "type", "daemon", "item", "text")


def _message_cells(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["id"], r["session_id"], r["kind"], r["target"], r["status"], r["attempts"],
            r["retry_needed"], r["next_attempt_at"], r["time_created"], r["error_text"])


def _event_cells(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["id"], r["time_logged"], r["type"], r["config_name"], r["message_id"], r["text"])


def _life_cells(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["id"], r["time_logged"], r["type"], r["job"], r["config_name"], r["text"])


def _stream(every: Callable[[int | None], Iterator[dict[str, Any]]], headers: tuple[str, ...],
            cells: Callable[[dict[str, Any]], tuple[Any, ...]], as_json: bool,
            as_row: Callable[[dict[str, Any]], dict[str, Any]] = lambda r: r, *,
            empty_header: bool = False) -> int:
    """Print every row ``every(up_to)`` reads, as JSON lines or a table; return the last id
    printed (0: none). A table's rows are read twice (widths, then printing), so they are
    never all in memory."""
    last = 0
    if as_json:
        for row in every(None):
            click.echo(report.json_line(as_row(row)))
            last = row["id"]
        return last

    def rows(up_to: int | None) -> Iterator[tuple[Any, ...]]:
        nonlocal last
        for row in every(up_to):
            last = row["id"]
            yield cells(row)

    sizes = report.widths(headers, rows(None))
    if last or empty_header:
        for line in report.lines(headers, rows(last) if last else iter(()), sizes):
            click.echo(line)
    return last


@click.command()
@click.argument("message_id", type=ROW_ID, metavar="ID")
@click.option("--json", "as_json", is_flag=True,
              help='one JSON object {"message", "response" (or "request"), "attempts", '
                   '"events"}, bodies as JSON')
@pass_ctx
def show(ctx: Context, message_id: int, as_json: bool) -> None:
    """One message whole: its header, body, response (or, for a response, its request),
    attempts and events."""
    from engine.store import viewer

    store = ctx.store
    row = viewer.message(store, message_id)
    if row is None:
        raise EncoreError(f"no message {message_id} in {safe_url(store.url)}")
    related = viewer.message(store, row["corresponding_id"]) if row["corresponding_id"] else None
    attempts = [dataclasses.asdict(a) for a in viewer.attempts_of(store, [message_id])[message_id]]
    events = viewer.events_of(store, [message_id])
    other = "response" if row["kind"] == "request" else "request"
    if as_json:
        click.echo(report.json_line({
            "message": _json_bodies(row), other: _json_bodies(related) if related else None,
            "attempts": attempts, "events": events}))
        return
    click.echo(f"message {row['id']}: {row['kind']} from {row['source'] or '-'} to "
               f"{row['target']}, {row['status']}")
    click.echo("\n" + report.table(("column", "value"),
                                   [(k, v) for k, v in row.items() if k != "body"]))
    click.echo("\nbody:\n" + _body_text(row["body"]))
    if related is None:
        click.echo(f"\n{other}: none")
    else:
        click.echo(f"\n{other} (message {related['id']}, {related['status']}):\n"
                   + _body_text(related["body"]))
    click.echo(f"\nattempts: {len(attempts) or 'none'}")
    if attempts:
        click.echo(report.table(
            ("attempt", "server", "started (UTC)", "ended (UTC)", "seconds", "outcome",
             "status", "error"),
            [(a["attempt"], a["server"], a["started_at"], a["ended_at"],
              f"{(a['ended_at'] - a['started_at']).total_seconds():.3f}"
              if a["ended_at"] else "in flight", a["outcome"], a["status_code"],
              a["error_text"]) for a in attempts]))
    click.echo(f"\nevents: {len(events) or 'none'}")
    if events:
        click.echo(report.table(("id", "time (UTC)", "type", "item", "text"),
                                [(e["id"], e["time_logged"], e["type"], e["config_name"],
                                  e["text"]) for e in events]))


def _body_text(body: str | None) -> str:
    """A stored body for reading: its JSON indented, or the text as it is; ``-`` for none."""
    if body is None:
        return "  -"
    try:
        text = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except ValueError:
        text = body
    return "\n".join("  " + line for line in text.splitlines())


@click.command()
@click.argument("ident", type=ROW_ID, metavar="ID")
@pass_ctx
def trace(ctx: Context, ident: int) -> None:
    """The visual trace of the session of message ID (or of session ID)."""
    from engine.cli.trace import trace_lines

    for line in trace_lines(ctx.store, ident):
        click.echo(line)


def parse_since(text: str | None) -> datetime | None:
    """``10m``, ``2h``, ``3d``, ``45s`` ago, or an ISO time (UTC if no zone)."""
    if not text:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].replace(".", "", 1).isdigit():
        try:
            return utcnow() - timedelta(seconds=float(text[:-1]) * units[text[-1]])
        except OverflowError as exc:
            raise click.BadParameter(f"{text!r} reaches back before the year 1",
                                     param_hint="--since") from exc
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(f"{text!r}: use 10m, 2h, 3d or an ISO time",
                                 param_hint="--since") from exc
    return value if value.tzinfo else value.replace(tzinfo=utcnow().tzinfo)
