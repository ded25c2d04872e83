"""``encore user …`` and ``encore token …`` typed as commands, checked in the SQL tables."""
from __future__ import annotations

from pathlib import Path

import pytest
from argon2 import PasswordHasher
from sqlalchemy import select

from engine.serving.auth import token_digest
from engine.store.models import api_token, portal_user
from engine.store.sql import SqlStore
from tests.acceptance.daemon import encore

pytestmark = pytest.mark.cli_in_process  # what the commands print and store

PRODUCTION = """
[production]
name = "UsersTest"
database = "sqlite:///{db}"
"""


def workdir(tmp_path: Path) -> SqlStore:
    db = tmp_path / "users.db"
    (tmp_path / "production.toml").write_text(PRODUCTION.format(db=db))
    encore("db", "upgrade", cwd=tmp_path)
    return SqlStore(f"sqlite:///{db}")


def test_users_are_added_with_an_argon2_hash_listed_and_removed(tmp_path: Path) -> None:
    store = workdir(tmp_path)
    added = encore("user", "add", "olga", "--role", "operator", "--password-stdin",
                   cwd=tmp_path, stdin="s3cret pass phrase\n")
    assert added.stdout.strip() == "user olga added with role operator"
    with store.engine.connect() as conn:
        row = conn.execute(select(portal_user)).one()
    assert row.role == "operator" and row.password_hash.startswith("$argon2")
    assert PasswordHasher().verify(row.password_hash, "s3cret pass phrase")
    listed = encore("user", "list", cwd=tmp_path).stdout
    assert "olga" in listed and "operator" in listed and "argon2" not in listed
    twice = encore("user", "add", "olga", "--role", "viewer", "--password-stdin",
                   cwd=tmp_path, stdin="another long password\n", check=False)
    assert twice.returncode == 1 and "exists already" in twice.stderr
    encore("user", "remove", "olga", cwd=tmp_path)
    gone = encore("user", "remove", "olga", cwd=tmp_path, check=False)
    assert gone.returncode == 1 and "no user named 'olga'" in gone.stderr
    store.dispose()


def test_a_user_needs_a_known_role_and_a_password(tmp_path: Path) -> None:
    workdir(tmp_path).dispose()
    role = encore("user", "add", "x", "--role", "root", "--password-stdin", cwd=tmp_path,
                  stdin="pw\n", check=False)
    assert role.returncode == 2 and "root" in role.stderr
    empty = encore("user", "add", "x", "--role", "viewer", "--password-stdin", cwd=tmp_path,
                   stdin="\n", check=False)
    assert empty.returncode == 1 and "password is empty" in empty.stderr
    short = encore("user", "add", "x", "--role", "viewer", "--password-stdin", cwd=tmp_path,
                   stdin="eleven char\n", check=False)
    assert short.returncode == 1 and "11 characters; it needs at least 12" in short.stderr
    policy = tmp_path / "production.toml"
    policy.write_text(policy.read_text() + "\n[portal]\npassword_min_length = 20\n")
    longer = encore("user", "add", "x", "--role", "viewer", "--password-stdin", cwd=tmp_path,
                    stdin="twelve chars\n", check=False)
    assert longer.returncode == 1 and "at least 20" in longer.stderr


def test_a_token_is_printed_once_alone_and_stored_as_its_hash(tmp_path: Path) -> None:
    store = workdir(tmp_path)
    created = encore("token", "create", "ci-bot", "--role", "sender", cwd=tmp_path)
    lines = created.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("enc_") and len(lines[0]) > 40
    with store.engine.connect() as conn:
        row = conn.execute(select(api_token)).one()
    assert (row.name, row.role, row.token_hash) == ("ci-bot", "sender", token_digest(lines[0]))
    listed = encore("token", "list", cwd=tmp_path).stdout
    assert "ci-bot" in listed and lines[0] not in listed
    assert "1 token(s) of ci-bot revoked" in encore("token", "revoke", "ci-bot",
                                                    cwd=tmp_path).stdout
    store.dispose()
