"""``encore send``: a message, or a file of them, enqueued for a target; with ``--wait``, its
response printed."""
from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

import click

from engine.cli.context import Context, pass_ctx
from engine.cli.params import SECONDS
from engine.client import decode_body, send_message, send_messages, wait_for
from engine.config.production import ProductionOutline
from engine.errors import ConfigurationError, MessageError
from engine.store.statuses import Status

if TYPE_CHECKING:
    from engine.store.sql import SqlStore


@click.command()
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
