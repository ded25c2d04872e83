"""Portal users, API tokens and counted login attempts (docs/portal.md, docs/security.md).
Only hashes are stored here; hashing is :mod:`engine.serving.auth`'s."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from engine.clock import as_utc
from engine.errors import OperatorError, StoreError
from engine.store.models import TOKEN_ROLES, USER_ROLES, api_token, login_guess, portal_user
from engine.store.sql import SqlStore

TOKEN_TOUCH_INTERVAL = timedelta(seconds=60)  # how often last_used_at is written at most


@dataclass(frozen=True)
class UserRow:
    """A portal user: name, role (viewer, operator, admin) and argon2 password hash."""

    name: str
    role: str
    password_hash: str
    created_at: datetime
    session_generation: int = 0  # grows at each logout; older sessions are refused
    time_zone: str = "UTC"


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
        with store.db.tx() as conn:
            conn.execute(portal_user.insert().values(name=name, role=role,
                                                     password_hash=password_hash,
                                                     created_at=now))
    except StoreError as exc:
        if isinstance(exc.__cause__, IntegrityError):
            raise OperatorError(f"a user named {name!r} exists already") from exc
        raise


def remove_user(store: SqlStore, name: str) -> None:
    """Delete user ``name`` (their portal sessions end with it); OperatorError if absent."""
    with store.db.tx() as conn:
        count = conn.execute(portal_user.delete().where(portal_user.c.name == name)).rowcount
    if not count:
        raise OperatorError(f"no user named {name!r}")


def get_user(store: SqlStore, name: str) -> UserRow | None:
    with store.db.read() as conn:
        row = conn.execute(select(portal_user).where(portal_user.c.name == name)).first()
    return None if row is None else UserRow(row.name, row.role, row.password_hash,
                                            as_utc(row.created_at),
                                            row.session_generation, row.time_zone)


def list_users(store: SqlStore) -> list[UserRow]:
    with store.db.read() as conn:
        rows = conn.execute(select(portal_user).order_by(portal_user.c.name)).all()
    return [UserRow(r.name, r.role, r.password_hash, as_utc(r.created_at),
                    r.session_generation, r.time_zone) for r in rows]


TIME_ZONES = ("UTC", "local")


def set_time_zone(store: SqlStore, name: str, time_zone: str) -> None:
    """How user ``name`` reads times in the portal; OperatorError for another value."""
    if time_zone not in TIME_ZONES:
        raise OperatorError(f"time zone {time_zone!r} is not one of {', '.join(TIME_ZONES)}")
    with store.db.tx() as conn:
        conn.execute(update(portal_user).where(portal_user.c.name == name)
                     .values(time_zone=time_zone))


def reset_password(store: SqlStore, name: str, password_hash: str) -> None:
    """Give user ``name`` a new password; their sessions end. OperatorError if absent."""
    with store.db.tx() as conn:
        count = conn.execute(update(portal_user).where(portal_user.c.name == name).values(
            password_hash=password_hash,
            session_generation=portal_user.c.session_generation + 1)).rowcount
    if not count:
        raise OperatorError(f"no user named {name!r}")


def revoke_token(store: SqlStore, token_id: int) -> TokenRow:
    """Delete token ``token_id``; return what it was. OperatorError if there is none."""
    with store.db.tx() as conn:
        row = conn.execute(select(api_token).where(api_token.c.id == token_id)).first()
        if row is None:
            raise OperatorError(f"no token with id {token_id}")
        conn.execute(api_token.delete().where(api_token.c.id == token_id))
    return TokenRow(row.id, row.name, row.role, as_utc(row.created_at),
                    as_utc(row.last_used_at))


def set_password_hash(store: SqlStore, name: str, password_hash: str) -> None:
    """Store a re-hash of ``name``'s password (argon2 parameters raised since)."""
    with store.db.tx() as conn:
        conn.execute(update(portal_user).where(portal_user.c.name == name)
                     .values(password_hash=password_hash))


def end_sessions(store: SqlStore, name: str) -> None:
    """End every portal session of user ``name``, on every portal."""
    with store.db.tx() as conn:
        conn.execute(update(portal_user).where(portal_user.c.name == name)
                     .values(session_generation=portal_user.c.session_generation + 1))


class _Spent(Exception):
    """A key whose window holds its limit of attempts already (rolls the count back)."""

    def __init__(self, window_start: datetime) -> None:
        self.window_start = window_start


def count_login_guess(store: SqlStore, keys: Sequence[str], *, now: datetime, limit: int,
                      window: timedelta) -> datetime | None:
    """Count one login attempt against each of ``keys``, before the password is checked;
    None when counted. A key already at ``limit`` within ``window`` counts nothing and
    its window's start is returned. One conditional upsert per key, so racing portals
    never pass the limit."""
    g = login_guess.c
    cutoff = now - window
    dialect = postgresql if store.is_postgres else sqlite
    over = g.window_start <= cutoff
    try:
        with store.db.tx(durable=False) as conn:
            for key in sorted(keys):  # one order everywhere: no deadlock
                upsert = dialect.insert(login_guess).values(key=key, window_start=now, guesses=1)
                upsert = upsert.on_conflict_do_update(
                    index_elements=[g.key],
                    set_={"guesses": case((over, 1), else_=g.guesses + 1),
                          "window_start": case((over, now), else_=g.window_start)},
                    where=or_(over, g.guesses < limit)).returning(g.key)
                if conn.execute(upsert).first() is None:
                    start = conn.execute(select(g.window_start).where(g.key == key)).scalar_one()
                    raise _Spent(as_utc(start))
    except _Spent as spent:
        return spent.window_start
    return None


def refund_login_guess(store: SqlStore, *, reset: str | None,
                       refund: Sequence[str]) -> None:
    """After a login: forget the attempts of key ``reset`` and take back the one just
    counted against each of ``refund``."""
    g = login_guess.c
    with store.db.tx(durable=False) as conn:
        for key in sorted({*refund} | ({reset} if reset is not None else set())):
            if key == reset:
                conn.execute(delete(login_guess).where(g.key == key))
            else:
                conn.execute(update(login_guess).where(g.key == key, g.guesses > 0)
                             .values(guesses=g.guesses - 1))


def purge_login_guesses(store: SqlStore, *, before: datetime) -> None:
    """Delete the rows of windows that started before ``before``."""
    g = login_guess.c
    stale = select(g.key).where(g.window_start < before).with_for_update(skip_locked=True)
    with store.db.tx(durable=False) as conn:
        conn.execute(delete(login_guess).where(g.key.in_(stale)))


def add_token(store: SqlStore, name: str, role: str, token_hash: str, *, now: datetime) -> int:
    """Store a new token's hash for holder ``name``; return the token's id."""
    _check_role(role, TOKEN_ROLES)
    with store.db.tx() as conn:
        return int(conn.execute(api_token.insert().values(
            name=name, role=role, token_hash=token_hash, created_at=now)
            .returning(api_token.c.id)).scalar_one())


def find_token(store: SqlStore, token_hash: str, *, now: datetime) -> TokenRow | None:
    """The token whose hash is ``token_hash``, or None; marks it used at most once per
    :data:`TOKEN_TOUCH_INTERVAL`."""
    t = api_token.c
    with store.db.read() as conn:
        row = conn.execute(select(api_token).where(t.token_hash == token_hash)).first()
    if row is None:
        return None
    last = as_utc(row.last_used_at)
    if last is None or now - last > TOKEN_TOUCH_INTERVAL:
        with store.db.tx(durable=False) as conn:
            conn.execute(update(api_token).where(
                t.id == row.id, or_(t.last_used_at.is_(None),
                                    t.last_used_at < now - TOKEN_TOUCH_INTERVAL))
                .values(last_used_at=now))
    return TokenRow(row.id, row.name, row.role, as_utc(row.created_at),
                    last)


def list_tokens(store: SqlStore) -> list[TokenRow]:
    with store.db.read() as conn:
        rows = conn.execute(select(api_token).order_by(api_token.c.id)).all()
    return [TokenRow(r.id, r.name, r.role, as_utc(r.created_at),
                     as_utc(r.last_used_at)) for r in rows]


def revoke_tokens(store: SqlStore, name: str) -> int:
    """Delete every token of holder ``name``; return how many there were."""
    with store.db.tx() as conn:
        return int(conn.execute(api_token.delete().where(api_token.c.name == name)).rowcount)


def _check_role(role: str, allowed: tuple[str, ...]) -> None:
    if role not in allowed:
        raise OperatorError(f"unknown role {role!r}; expected one of {', '.join(allowed)}")
