"""``encore portal``, ``encore user …`` and ``encore token …``; ``register(main)`` adds them."""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Protocol

import click

from engine.cli import report
from engine.clock import utcnow
from engine.config.production import PortalConfig, ProductionConfig, ProductionOutline
from engine.errors import ConfigurationError, OperatorError
from engine.portal.auth import check_password
from engine.serving.auth import hash_password, new_token, token_digest
from engine.store import accounts
from engine.store.models import TOKEN_ROLES, USER_ROLES
from engine.store.sql import SqlStore

PORTAL_DEFAULTS = PortalConfig.defaults()  # the portal of a production without [portal]


class PortalContext(Protocol):
    """What these commands need of the group's context object (``engine.cli.context.Context``)."""

    @property
    def store(self) -> SqlStore: ...

    @property
    def production(self) -> ProductionConfig: ...

    @property
    def outline(self) -> ProductionOutline: ...


@click.command()
@click.option("--host", default=None,
              help="address to listen on (default: [portal] host, else "
                   f"{PORTAL_DEFAULTS.host})")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help=f"port (default: [portal] port, else {PORTAL_DEFAULTS.port})")
@click.pass_obj
def portal(ctx: PortalContext, host: str | None, port: int | None) -> None:
    """Serve the management portal and JSON API from the production's database (no daemon
    needed). Loopback unless told otherwise; TLS from [portal] tls_cert and tls_key."""
    from engine.portal.server import serve

    config = ctx.production.portal or PORTAL_DEFAULTS
    config = replace(config, host=host or config.host, port=port or config.port)
    serve(ctx.store, ctx.production, config, env=os.environ)


# -- users -------------------------------------------------------------------------------
@click.group()
def user() -> None:
    """Portal users: viewers read, operators also act, admins also manage users."""


@user.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(USER_ROLES), required=True)
@click.option("--password-stdin", is_flag=True,
              help="read the password from the first line of stdin instead of a prompt")
@click.pass_obj
def user_add(ctx: PortalContext, name: str, role: str, password_stdin: bool) -> None:
    """Add user NAME with ROLE; the password is asked for (or read from stdin)."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True,
                                err=True)
    check_password(password, _min_password_length(ctx))
    accounts.add_user(ctx.store, name, role, hash_password(password), now=utcnow())
    click.echo(f"user {name} added with role {role}")


def _min_password_length(ctx: PortalContext) -> int:
    """``[portal] password_min_length`` of the production file (read without importing its
    items' classes), else the default."""
    try:
        config = ctx.outline.portal
    except (ConfigurationError, OSError, AttributeError):
        config = None
    return (config or PORTAL_DEFAULTS).password_min_length


@user.command("list")
@click.pass_obj
def user_list(ctx: PortalContext) -> None:
    """List the portal's users (never their passwords)."""
    rows = accounts.list_users(ctx.store)
    if not rows:
        click.echo("no users; add one with `encore user add NAME --role admin`")
        return
    click.echo(report.table(("user", "role", "created (UTC)"),
                            [(u.name, u.role, u.created_at) for u in rows]))


@user.command("remove")
@click.argument("name")
@click.pass_obj
def user_remove(ctx: PortalContext, name: str) -> None:
    """Remove user NAME; their portal sessions end at once."""
    accounts.remove_user(ctx.store, name)
    click.echo(f"user {name} removed")


# -- tokens ------------------------------------------------------------------------------
@click.group()
def token() -> None:
    """API tokens: senders submit messages, viewers read, operators also act."""


@token.command("create")
@click.argument("name")
@click.option("--role", type=click.Choice(TOKEN_ROLES), required=True)
@click.pass_obj
def token_create(ctx: PortalContext, name: str, role: str) -> None:
    """Create a token for NAME and print it, alone on stdout, once: only its hash is kept."""
    secret = new_token()
    accounts.add_token(ctx.store, name, role, token_digest(secret), now=utcnow())
    click.echo(secret)


@token.command("list")
@click.pass_obj
def token_list(ctx: PortalContext) -> None:
    """List tokens: holder, role, when created and last used (never the token)."""
    rows = accounts.list_tokens(ctx.store)
    if not rows:
        click.echo("no tokens")
        return
    click.echo(report.table(("id", "name", "role", "created (UTC)", "last used (UTC)"),
                            [(t.id, t.name, t.role, t.created_at, t.last_used_at)
                             for t in rows]))


@token.command("revoke")
@click.argument("name")
@click.pass_obj
def token_revoke(ctx: PortalContext, name: str) -> None:
    """Revoke every token of NAME."""
    count = accounts.revoke_tokens(ctx.store, name)
    if not count:
        raise OperatorError(f"no token of {name!r}")
    click.echo(f"{count} token(s) of {name} revoked")


COMMANDS = (portal, user, token)


def register(main: click.Group) -> None:
    """Add the portal commands to the ``encore`` group."""
    for command in COMMANDS:
        main.add_command(command)
