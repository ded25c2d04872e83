"""The ``encore`` command line (docs/operating.md)."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import pkgutil
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from engine.cli import report
from engine.cli.backup import backup as backup_command
from engine.cli.lazy import lazy_module
from engine.cli.operator import register as register_operator_commands
from engine.cli.params import COUNT, ROW_ID, SECONDS
from engine.client import decode_body, send_message, send_messages, wait_for
from engine.clock import utcnow
from engine.config.production import (
    ItemEntry,
    ProductionConfig,
    ProductionOutline,
    absolute_sqlite_url,
    find_production_file,
    read_outline,
)
from engine.errors import ConfigurationError, EncoreError, MessageError, StoreError
from engine.store.breaker_row import BreakerRow
from engine.store.database import DEFAULT_DATABASE_URL, normalise_url
from engine.store.statuses import Status

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import URL

    from engine.store.queries import EventFilter
    from engine.store.sql import SqlStore

# Imported when first used: `encore send` never needs SQLAlchemy (engine.store.lite), and
# every command but `send` on an SQLite file pays for it only when it reads the database.
sa = lazy_module("sqlalchemy")
migrate = lazy_module("engine.store.migrate")
models = lazy_module("engine.store.models")
queries = lazy_module("engine.store.queries")

EVENT_TYPES = click.Choice(["Assert", "Error", "Warning", "Info", "Trace", "Alert"])
DEFAULT_LIMIT = 50  # rows `encore messages` and `encore log` show without --limit or --all


class Context:
    """Lazily reads the production file and opens the store for a command.

    ``outline`` imports none of the classes the items name (enough for the commands that
    only read the database); ``production`` imports them all (``encore run``).
    """

    def __init__(self, production_option: str | None) -> None:
        self.option = production_option
        self._outline: ProductionOutline | None = None
        self._production: ProductionConfig | None = None
        self._store: SqlStore | None = None

    @property
    def outline(self) -> ProductionOutline:
        if self._outline is None:
            self._outline = read_outline(find_production_file(self.option, os.environ))
        return self._outline

    @property
    def production(self) -> ProductionConfig:
        if self._production is None:
            self._production = self.outline.resolve()
        return self._production

    def database_url(self) -> str:
        """The production's database (a relative SQLite path read from the file is the
        file's directory's); without a production file, $ENCORE_DATABASE_URL, else the
        default — relative to the current directory. SQLite paths come back absolute, so
        that every message naming the database says which file it is."""
        path = find_production_file(self.option, os.environ)
        if path.exists() or self.option:
            return self.outline.database
        return absolute_sqlite_url(os.environ.get("ENCORE_DATABASE_URL")
                                   or DEFAULT_DATABASE_URL, Path.cwd())

    @property
    def store(self) -> SqlStore:
        """The production's store, refused with one plain sentence when its database is
        missing, unreachable or not upgraded to this Encore's schema."""
        if self._store is None:
            self._store = open_store(self.database_url())
        return self._store

    @property
    def intake(self) -> Any:
        """Where ``encore send`` puts messages: the hot path's statements on a bare driver
        connection (:class:`~engine.store.lite.LiteIntake`: no SQLAlchemy to import) when
        the database is a plain one at this Encore's schema, else :attr:`store`, whose
        checks say what is wrong."""
        if self._store is not None:
            return self._store
        from engine.store.lite import LiteIntake, NotLite

        try:
            lite = LiteIntake(self.database_url())
            try:
                lite.check_schema()
            except NotLite:
                lite.dispose()
                raise
        except (NotLite, ImportError):
            return self.store
        return lite

    def reachable_store(self) -> SqlStore:
        """The store, checked only for being reachable (for ``encore db upgrade``)."""
        if self._store is None:
            self._store = open_store(self.database_url(), need_schema=False)
        return self._store


def open_store(url: str, *, need_schema: bool = True) -> SqlStore:
    """A :class:`SqlStore` on ``url``, after one connection that proves the database is
    there and (``need_schema``) holds this Encore's tables. Raises :class:`StoreError`
    saying what is wrong and what to run; the password in ``url`` is never shown."""
    parsed = _parse_url(url)
    if (directory := _missing_sqlite_directory(parsed)) is not None:
        raise StoreError(f"the database {_safe_url(url)} cannot be created: its directory "
                         f"{directory} does not exist; create it (mkdir -p {directory}), "
                         "then run `encore db upgrade`")
    if need_schema and _missing_sqlite_file(parsed):
        raise StoreError(f"the database {_safe_url(url)} does not exist yet; "
                         "run `encore db upgrade` to create it")
    from engine.store.sql import SqlStore

    try:
        store = SqlStore(url)
    except (sa.exc.ArgumentError, ImportError) as exc:  # an unknown dialect, no driver
        raise StoreError(f"cannot use the database {_safe_url(url)}: {_first_line(exc)}"
                         ) from exc
    try:
        _check_database(store, need_schema=need_schema)
    except StoreError:
        store.dispose()
        raise
    return store


def _check_database(store: SqlStore, *, need_schema: bool) -> None:
    """Connect once; with ``need_schema``, require this Encore's schema."""
    try:
        current = migrate.current_revision(store.engine)
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(f"cannot connect to the database {_safe_url(store.url)}: "
                         f"{_first_line(exc)}; check that it is running and that the "
                         "production file's database (or ENCORE_DATABASE_URL) is right"
                         ) from exc
    if not need_schema:
        return
    if current is None:
        raise StoreError(f"the database {_safe_url(store.url)} has no Encore tables; "
                         "run `encore db upgrade`")
    store.check_schema()  # an older schema (upgrade) or a newer one (a newer Encore)


def _parse_url(url: str) -> URL:
    """``url`` parsed; StoreError (not quoting it: it may hold a password) if it does not."""
    try:
        return sa.engine.make_url(normalise_url(url))
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise StoreError("the database URL (the production file's database, or "
                         "ENCORE_DATABASE_URL) is not a valid SQLAlchemy URL such as "
                         "'sqlite:///encore.db' or 'postgresql://user@host/db'") from exc


def _missing_sqlite_file(parsed: URL) -> bool:
    """True for an SQLite file URL whose file is not there (connecting would create it)."""
    return (parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")
            and not os.path.exists(parsed.database))


def _missing_sqlite_directory(parsed: URL) -> str | None:
    """The directory of an SQLite file URL when it is not there (SQLite creates the file,
    never its directory), else None."""
    if not _missing_sqlite_file(parsed):
        return None
    directory = os.path.dirname(os.path.abspath(str(parsed.database)))
    return None if os.path.isdir(directory) else directory


def _first_line(exc: BaseException) -> str:
    """The driver's reason for a database error, without SQL, parameters or links."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


pass_ctx = click.make_pass_decorator(Context)


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
            click.echo(f"error: {_first_line(exc)}", err=True)
            sys.exit(1)
        except EncoreError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except Exception as exc:
            if not _is_database_error(exc):
                raise
            # a store path that did not translate its error
            click.echo(f"error: database error: {_first_line(exc)}", err=True)
            sys.exit(1)


def _is_database_error(exc: BaseException) -> bool:
    """True for an SQLAlchemy error (none can be raised before SQLAlchemy was imported)."""
    loaded = sys.modules.get("sqlalchemy.exc")
    return loaded is not None and isinstance(exc, loaded.SQLAlchemyError)


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


@main.command()
@pass_ctx
def run(ctx: Context) -> None:
    """Run the production in the foreground (SIGTERM/SIGINT: graceful stop)."""
    from engine.runtime.daemon import Daemon

    Daemon(ctx.production, store=ctx.store).run()


@main.command()
@click.argument("target")
@click.option("--body", metavar="JSON|@FILE|-",
              help="the request: JSON, @FILE to read it from a file, - to read stdin")
@click.option("--many", type=click.File("r", encoding="utf-8"), metavar="FILE",
              help="a file (- for stdin) of JSON lines, one request per line, all enqueued "
                   "in one transaction")
@click.option("--wait", "wait", type=SECONDS, default=None, metavar="S",
              help="wait up to S seconds and print the response; non-zero exit on error")
@click.option("--json", "as_json", is_flag=True,
              help='print one JSON object {"id", "status", "response"}')
@pass_ctx
def send(ctx: Context, target: str, body: str | None, many: TextIO | None,
         wait: float | None, as_json: bool) -> None:
    """Enqueue a message for TARGET and print its id (with --wait, the response on stdout
    and the id on stderr). With --many, enqueue every line of FILE or none of them."""
    if (body is None) == (many is None):
        raise click.UsageError("give either --body or --many")
    if many is not None:
        if wait is not None:
            raise click.UsageError("--wait waits for one message; it does not go with --many")
        _send_many(ctx, target, many, as_json)
        return
    assert body is not None
    request = _decode_body(_read_body_option(body), where="--body")
    with _explained_target(ctx.outline, target):
        message_id = send_message(ctx.store if wait is not None else ctx.intake, ctx.outline,
                                  target, request)
    if wait is None:
        _print_sent(message_id, Status.QUEUED, None, as_json)
        return
    if not as_json:
        click.echo(message_id, err=True)  # stdout holds the response alone, for pipes
    sys.exit(_wait_and_print(ctx.store, message_id, wait, as_json))


@contextlib.contextmanager
def _explained_target(production: ProductionOutline, target: str) -> Iterator[None]:
    """Tell a target the production does not have from one it has but cannot load: for
    an item whose settings (or class) are wrong, say so and name the file to fix, instead
    of calling it unknown."""
    try:
        yield
    except MessageError as exc:
        cause = exc.__cause__
        if (not isinstance(cause, ConfigurationError)
                or target not in {entry.name for entry in production.entries}):
            raise
        what = "its settings are wrong" if cause.key else "it cannot be loaded"
        where = f" in {production.path.resolve()}" if production.path else ""
        raise ConfigurationError(f"target {target!r} is an item of the production, but {what}: "
                                 f"{cause}; fix it{where} (`encore run` refuses it too); "
                                 "nothing was enqueued") from exc


def _print_sent(message_id: int, status: str, response: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"id": message_id, "status": status, "response": response}))
    else:
        click.echo(message_id)


def _wait_and_print(store: SqlStore, message_id: int, wait: float, as_json: bool) -> int:
    """Wait for ``message_id``, print its response; return the exit status: 0 completed,
    1 ended in another status, 2 not finished after ``wait`` seconds."""
    row = wait_for(store, message_id, wait)
    if row is None:
        click.echo(f"error: message {message_id} not finished after {wait:g} s "
                   "(is `encore run` running?)", err=True)
        if as_json:
            current = store.get_message(message_id)
            _print_sent(message_id, current.status if current else Status.QUEUED, None, True)
        return 2
    if row.status != Status.COMPLETED:
        click.echo(f"error: message {message_id} ended {row.status}: {row.error_text}", err=True)
        if as_json:
            _print_sent(message_id, row.status, None, True)
        return 1
    response = store.get_message(row.corresponding_id) if row.corresponding_id else None
    text = response.body if response is not None and response.body else "null"
    if as_json:
        _print_sent(message_id, row.status, json.loads(text), True)
    else:
        click.echo(text)
    return 0


def _send_many(ctx: Context, target: str, lines: TextIO, as_json: bool) -> None:
    """Enqueue one message per JSON line of ``lines``, all or none; print the count and the
    first and last id."""
    name = "stdin" if lines.name == "<stdin>" else lines.name
    bodies = _decode_lines(lines, name=name)
    with _explained_target(ctx.outline, target):
        _check_bodies(ctx.outline, target, bodies, name=name)
        ids = send_messages(ctx.intake, ctx.outline, target, [b for _, b in bodies],
                            source="cli")
    first, last = (ids[0], ids[-1]) if ids else (None, None)
    if as_json:
        click.echo(json.dumps({"count": len(ids), "first_id": first, "last_id": last}))
    elif ids:
        click.echo(f"{len(ids)} messages enqueued: ids {first} to {last}")
    else:
        click.echo(f"0 messages enqueued: {name} holds no request")


def _read_body_option(value: str) -> str:
    """The text ``--body`` stands for: ``@FILE`` read from FILE, ``-`` read from stdin,
    anything else as it is."""
    if value == "-":
        return sys.stdin.read()
    if not value.startswith("@"):
        return value
    try:
        with open(value[1:], encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {value[1:]!r}: {exc}",
                                 param_hint="--body") from exc


def _decode_body(text: str, *, where: str) -> Any:
    """``text`` as JSON (see :func:`engine.client.decode_body`)."""
    return decode_body(text, where=where)


def _decode_lines(lines: TextIO, *, name: str) -> list[tuple[int, Any]]:
    """(line number, decoded body) for every non-blank line of a JSON-lines file."""
    try:
        return [(number, _decode_body(line.strip(), where=f"{name} line {number}"))
                for number, line in enumerate(lines, start=1) if line.strip()]
    except UnicodeDecodeError as exc:
        raise MessageError(f"{name} is not UTF-8 text: {exc}") from exc


def _check_bodies(production: ProductionOutline, target: str, bodies: list[tuple[int, Any]],
                  *, name: str) -> None:
    """Refuse the first body that does not fit ``target``'s request class, naming its line.
    An unknown target is left to :func:`send_messages`, which says so."""
    try:
        request_class = getattr(production.item(target).cls, "request_class", None)
    except ConfigurationError:
        return
    if request_class is None:  # an item that takes no messages: send_messages says so
        return
    for number, body in bodies:
        try:  # a decoded JSON string is checked as the plain string it is
            request_class.from_dict(str(body) if isinstance(body, str) else body)
        except MessageError as exc:
            raise MessageError(f"{name} line {number}: {exc}; nothing was enqueued") from exc


@main.command("log")
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
    left_out = _left_out(ctx.store, rows, limit, models.event_log, flt.conditions())
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
    """The rows a listing shows: ``--limit N``, every one with ``--all`` (None), else the
    newest :data:`DEFAULT_LIMIT`."""
    if show_all and limit is not None:
        raise click.UsageError("give either --limit N or --all, not both")
    return None if show_all else limit or DEFAULT_LIMIT


def _left_out(store: SqlStore, rows: list[dict[str, Any]], limit: int | None, table: Table,
              where: list[Any]) -> int:
    """How many rows of ``table`` matching ``where`` are older than the oldest of ``rows``
    (the newest ``limit``): the ones a limited listing left out (0 when it was not full)."""
    if limit is None or len(rows) < limit:
        return 0
    query = sa.select(sa.func.count()).select_from(table).where(table.c.id < rows[0]["id"],
                                                                 *where)
    with store.read() as conn:
        return int(conn.execute(query).scalar_one())


def _say_left_out(left_out: int, shown: int, noun: str) -> None:
    """One line on stderr (stdout stays the rows alone, for pipes) when rows were left out."""
    def nouns(count: int) -> str:
        return noun if count == 1 else noun + "s"

    if left_out:
        click.echo(f"(the newest {shown} {nouns(shown)} shown; {left_out} older "
                   f"{nouns(left_out)} left out: --limit N or --all shows more)", err=True)


def _json_bodies(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its ``body`` as the JSON value it holds, not as a string of JSON text
    (a body that is somehow not JSON stays the text it is)."""
    if row.get("body") is None:
        return row
    try:
        return {**row, "body": json.loads(row["body"])}
    except ValueError:
        return row


@main.command()
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
    h = models.message_header.c
    left_out = _left_out(ctx.store, rows, limit, models.message_header, [
        column == value for column, value in
        ((h.status, status), (h.target, item), (h.session_id, session_id)) if value is not None])
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
    """Print every row ``every(up_to)`` reads (oldest first, a chunk at a time), as JSON
    lines or as a table (``empty_header``: its headers even without rows); return the last id
    printed (0: none). A table's columns are as
    wide as its widest cell: its rows are read twice, once for the widths, then up to the
    last id of that read to print them, so that they are never all in memory."""
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


def _warn_lost_file(url: str) -> None:
    """A line on stderr when a process (a daemon) still writes into an SQLite file that was
    at ``url``'s path and was deleted or replaced there (engine.store.filewatch)."""
    from engine.store.filewatch import lost_file_warning

    warning = lost_file_warning(url)
    if warning is not None:
        click.echo(warning, err=True)


@main.command()
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
        raise EncoreError(f"no message {message_id} in {_safe_url(store.url)}")
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


@main.command()
@click.argument("ident", type=ROW_ID, metavar="ID")
@pass_ctx
def trace(ctx: Context, ident: int) -> None:
    """The visual trace of the session of message ID (or of session ID)."""
    from engine.cli.trace import trace_lines

    for line in trace_lines(ctx.store, ident):
        click.echo(line)


@main.command()
@pass_ctx
def status(ctx: Context) -> None:
    """Items, queue depths, retries, last errors, what runs (the daemons running each item,
    ready or not, refused by the last reload) beside what the file says, and every daemon:
    alive or not, the items it serves, and the leases it holds."""
    _warn_lost_file(ctx.database_url())
    production, store = ctx.outline, ctx.store
    stats, overrides = queries.queue_stats(store), store.item_overrides()
    now = store.db_now()
    breakers = _breakers(store)
    reports = _running_reports(store, now, production.lease_seconds)
    leader = _live_leader(store, now, reports)
    rows = []
    for item in production.entries:
        s = stats.get(item.name, {})
        oldest = s.get("oldest")
        last_error = s.get("last_error")
        on_leader = leader if _is_service(item) else None
        rows.append((item.name, "yes" if overrides.get(item.name, item.enabled) else "no",
                     _running_text(item.name, reports, leader=on_leader), item.pool_size,
                     s.get("queued", 0),
                     f"{(now - oldest).total_seconds():.0f}s" if oldest else "-",
                     s.get("retrying", 0), _breaker_text(item, breakers, now),
                     item.raw_settings.get("rate_limit") or "-",
                     last_error[1] if last_error else "-"))
    for warning in production.refusals():
        click.echo(f"warning: {warning}; `encore run` refuses it (`encore check` says more)",
                   err=True)
    click.echo(f"production {production.name} on {_safe_url(store.url)}")
    click.echo(report.table(("item", "enabled", "running", "pool", "queued", "oldest",
                             "retrying", "breaker", "rate limit", "last error"), rows))
    click.echo("")
    click.echo(_daemon_table(store, now, production.lease_seconds))


def _alive(row: dict[str, Any], now: datetime, lease_seconds: float) -> str:
    """``yes``; ``no`` when its heartbeat is older than a lease; ``no (pid 12 a zombie)``
    for a daemon of this host whose process is dead, whatever its heartbeat says
    (:func:`~engine.runtime.liveness.why_local_daemon_dead`)."""
    from engine.runtime.liveness import why_local_daemon_dead

    why = why_local_daemon_dead(row)
    if why is not None:
        return f"no ({why})"
    return "yes" if row["heartbeat_at"] >= now - timedelta(seconds=lease_seconds) else "no"


def _running_reports(store: SqlStore, now: datetime, lease_seconds: float
                     ) -> dict[str, dict[str, dict[str, Any]]]:
    """What each live daemon reports of its items (``daemon.item_states``)."""
    from engine.store.running import read_states

    return {d["id"]: read_states(d.get("item_states"))[0] for d in queries.daemons(store)
            if _alive(d, now, lease_seconds) == "yes"}


def _running_text(name: str, reports: dict[str, dict[str, dict[str, Any]]], *,
                  leader: str | None = None) -> str:
    """``2 daemons, ready: <id>, <id>``, ``1 daemon, not ready: <id>``, ``refused …``, ``no
    daemon``; ``no daemon reports it`` for an item none of the live daemons runs. An inbound
    service is reported by each daemon serving it; a business service that none reports
    runs on the schedule of ``leader`` (the live daemon holding the leader lease)."""
    states = {daemon_id: r[name] for daemon_id, r in reports.items() if name in r}
    refused = next((str(s["refused"]) for s in states.values() if s.get("refused")), None)
    on = {d: s for d, s in states.items() if s.get("state") in ("ready", "not_ready")}
    failed = next((s for s in states.values() if s.get("state") == "failed"), None)
    if on:
        count = f"{len(on)} daemon{'s' if len(on) > 1 else ''}"
        ready = "ready" if all(s["state"] == "ready" for s in on.values()) else "not ready"
        text = f"{count}, {ready}: {', '.join(sorted(on))}"
        return f"{text}; change refused: {refused}" if refused else text
    if failed is not None:
        return f"failed: {failed.get('detail', '?')}"
    if refused:
        return f"refused by the last reload: {refused}"
    if leader is not None:
        return f"1 daemon, ready: {leader} (the leader, on its schedule)"
    return "no daemon" if not reports else "no daemon reports it"


def _live_leader(store: SqlStore, now: datetime,
                 reports: dict[str, dict[str, dict[str, Any]]]) -> str | None:
    """The live daemon holding the leader lease (it runs the business services), if any."""
    from engine.runtime.cluster import LEADER

    try:
        leases = store.leases.all()
    except EncoreError:  # a schema from before scale-out
        return None
    return next((lease.owner for lease in leases if lease.name == LEADER
                 and lease.expires_at >= now and lease.owner in reports), None)


def _is_service(entry: ItemEntry) -> bool:
    """Whether ``entry`` is a service (not an operation or process); False if its class
    does not import (the warnings say why)."""
    from engine.config.user_modules import resolve_class
    from engine.host import BusinessOperation
    from engine.process import BusinessProcess

    try:
        cls = resolve_class(entry.class_path, item=entry.name)
    except ConfigurationError:
        return False
    return not issubclass(cls, (BusinessOperation, BusinessProcess))


def _breakers(store: SqlStore) -> dict[str, BreakerRow] | None:
    """Every item's circuit breaker; None on a schema from before breakers."""
    try:
        return store.breakers.all()
    except EncoreError:
        return None


def _breaker_text(item: ItemEntry, breakers: dict[str, BreakerRow] | None,
                  now: datetime) -> str:
    """``closed``, ``closed, 2 failed``, ``open, probe in 25s``, ``half-open`` (its probe in
    flight); ``-`` without a breaker, ``?`` on a schema from before breakers."""
    if not item.raw_settings.get("breaker_threshold"):
        return "-"
    if breakers is None:
        return "?"
    row = breakers.get(item.name)
    if row is None or row.state == "closed":
        failures = 0 if row is None else row.failures
        return f"closed, {failures} failed" if failures else "closed"
    if row.state == "open" and row.open_until is not None:
        left = max((row.open_until - now).total_seconds(), 0.0)
        return f"open, probe in {left:.0f}s"
    return "half-open"


def _daemon_table(store: SqlStore, now: datetime, lease_seconds: float) -> str:
    daemons = queries.daemons(store)
    if not daemons:
        return "no daemon running"
    holds: dict[str, list[str]] = {}
    try:
        leases = store.leases.all()
    except EncoreError:  # a schema from before scale-out: no lease table yet
        leases = None
    for lease in leases or ():
        if lease.expires_at >= now:
            holds.setdefault(lease.owner, []).append(lease.name)
    return report.table(
        ("daemon", "host", "pid", "started (UTC)", "heartbeat (UTC)", "alive", "items",
         "leases"),
        [(d["id"], d["host"], d["pid"], d["started_at"], d["heartbeat_at"],
          _alive(d, now, lease_seconds), d["items"] or "-",
          ", ".join(holds.get(d["id"], [])) or ("-" if leases is not None else "?"))
         for d in daemons])


@main.group()
def db() -> None:
    """The database: create or upgrade its tables, back it up."""


@db.command()
@pass_ctx
def upgrade(ctx: Context) -> None:
    """Create or upgrade the tables (Alembic upgrade to head); say which it did."""
    url = ctx.database_url()
    _warn_lost_file(url)
    new_file = _missing_sqlite_file(_parse_url(url))  # connecting creates it
    store = ctx.reachable_store()
    before = migrate.upgrade(store.engine)
    after = migrate.current_revision(store.engine)
    name = _safe_url(store.url)
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
    # resolved by name, as LAZY_COMMANDS are: engine.cli.dbcopy imports this module
    pkgutil.resolve_name("engine.cli.dbcopy:copy_to")(ctx, to_url, batch)


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


def _safe_url(url: str) -> str:
    """The database URL without its password."""
    for form in (url, normalise_url(url)):  # as written; else libpq's comma form, read
        try:
            return sa.engine.make_url(form).render_as_string(hide_password=True)
        except (sa.exc.ArgumentError, ValueError):
            continue
    return "(the database URL, which is not a valid SQLAlchemy URL)"


register_operator_commands(main)
db.add_command(backup_command)

if __name__ == "__main__":  # pragma: no cover
    main()
