"""Portal users and API tokens (DESIGN.md §9): the ``portal_user`` and ``api_token`` rows.

This module stores and finds hashes; it never sees a password or a token in clear. Hashing
(argon2 for passwords, SHA-256 for tokens, which are random and long) is the portal's
business: :mod:`engine.portal.auth`.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError

from engine.clock import as_utc
from engine.errors import OperatorError, StoreError
from engine.store.models import TOKEN_ROLES, USER_ROLES, api_token, portal_user
from engine.store.sql import SqlStore

TOKEN_TOUCH_INTERVAL = timedelta(seconds=60)  # last_used_at is written at most this often


@dataclass(frozen=True)
class UserRow:
    """A portal user: name, role (viewer, operator, admin) and argon2 password hash."""

    name: str
    role: str
    password_hash: str
    created_at: datetime


@dataclass(frozen=True)
class TokenRow:
    """An API token's holder and role (sender, viewer, operator, admin); no secret."""

    id: int
    name: str
    role: str
    created_at: datetime
    last_used_at: datetime | None


def add_user(store: SqlStore, name: str, role: str, password_hash: str, *,
             now: datetime) -> None:
    """Create user ``name``; OperatorError if the name is taken or the role unknown."""
    _check_role(role, USER_ROLES)
    try:
        with store._tx() as conn:
            conn.execute(portal_user.insert().values(name=name, role=role,
                                                     password_hash=password_hash,
                                                     created_at=now))
    except StoreError as exc:  # the primary key on name
        if isinstance(exc.__cause__, IntegrityError):
            raise OperatorError(f"a user named {name!r} exists already") from exc
        raise


def remove_user(store: SqlStore, name: str) -> None:
    """Delete user ``name`` (their portal sessions end with it); OperatorError if absent."""
    with store._tx() as conn:
        count = conn.execute(portal_user.delete().where(portal_user.c.name == name)).rowcount
    if not count:
        raise OperatorError(f"no user named {name!r}")


def get_user(store: SqlStore, name: str) -> UserRow | None:
    with store._read() as conn:
        row = conn.execute(select(portal_user).where(portal_user.c.name == name)).first()
    return None if row is None else UserRow(row.name, row.role, row.password_hash,
                                            as_utc(row.created_at))  # type: ignore[arg-type]


def list_users(store: SqlStore) -> list[UserRow]:
    with store._read() as conn:
        rows = conn.execute(select(portal_user).order_by(portal_user.c.name)).all()
    return [UserRow(r.name, r.role, r.password_hash, as_utc(r.created_at))  # type: ignore[arg-type]
            for r in rows]


def set_password_hash(store: SqlStore, name: str, password_hash: str) -> None:
    """Store a re-hash of ``name``'s password (argon2 parameters raised since)."""
    with store._tx() as conn:
        conn.execute(update(portal_user).where(portal_user.c.name == name)
                     .values(password_hash=password_hash))


def add_token(store: SqlStore, name: str, role: str, token_hash: str, *, now: datetime) -> int:
    """Store a new token's hash for holder ``name``; return the token's id."""
    _check_role(role, TOKEN_ROLES)
    with store._tx() as conn:
        return int(conn.execute(api_token.insert().values(
            name=name, role=role, token_hash=token_hash, created_at=now)
            .returning(api_token.c.id)).scalar_one())


def find_token(store: SqlStore, token_hash: str, *, now: datetime) -> TokenRow | None:
    """The token whose hash is ``token_hash``, or None. Marks it used (at most once per
    :data:`TOKEN_TOUCH_INTERVAL`, so that intake does not write a row per request)."""
    t = api_token.c
    with store._read() as conn:
        row = conn.execute(select(api_token).where(t.token_hash == token_hash)).first()
    if row is None:
        return None
    last = as_utc(row.last_used_at)
    if last is None or now - last > TOKEN_TOUCH_INTERVAL:
        with store._tx(durable=False) as conn:
            conn.execute(update(api_token).where(
                t.id == row.id, or_(t.last_used_at.is_(None),
                                    t.last_used_at < now - TOKEN_TOUCH_INTERVAL))
                .values(last_used_at=now))
    return TokenRow(row.id, row.name, row.role, as_utc(row.created_at),  # type: ignore[arg-type]
                    last)


def list_tokens(store: SqlStore) -> list[TokenRow]:
    with store._read() as conn:
        rows = conn.execute(select(api_token).order_by(api_token.c.id)).all()
    return [TokenRow(r.id, r.name, r.role, as_utc(r.created_at),  # type: ignore[arg-type]
                     as_utc(r.last_used_at)) for r in rows]


def revoke_tokens(store: SqlStore, name: str) -> int:
    """Delete every token of holder ``name``; return how many there were."""
    with store._tx() as conn:
        return int(conn.execute(api_token.delete().where(api_token.c.name == name)).rowcount)


def _check_role(role: str, allowed: tuple[str, ...]) -> None:
    if role not in allowed:
        raise OperatorError(f"unknown role {role!r}; expected one of {', '.join(allowed)}")
