"""Credentials by name, from the environment or the ``ENCORE_CREDENTIALS_FILE`` TOML file
(docs/security.md); the password never appears in an error, a repr or a log line."""
from __future__ import annotations

import base64
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus

from engine.errors import ConfigurationError

FILE_VARIABLE = "ENCORE_CREDENTIALS_FILE"


@dataclass(frozen=True)
class Credentials:
    """A user name and a password. The password is left out of ``repr``."""

    username: str
    password: str = field(repr=False)
    name: str = ""

    def redact(self, text: str) -> str:
        """``text`` with the password replaced by ``***`` in every form it takes on the wire
        (a server may echo the ``Authorization`` header in an error page)."""
        for secret in self.secret_forms():
            text = text.replace(secret, "***")
        return text

    def secret_forms(self) -> list[str]:
        """Every encoding of the secret to hide, longest first (so no part of one is left)."""
        if not self.password:
            return []
        basic = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        forms = {self.password, quote(self.password, safe=""), quote_plus(self.password),
                 basic, basic.rstrip("=")}
        return sorted(forms, key=len, reverse=True)


def variable_prefix(name: str) -> str:
    """``payments-eu`` → ``ENCORE_CREDENTIALS_PAYMENTS_EU``."""
    return "ENCORE_CREDENTIALS_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def resolve_credentials(name: str, env: Mapping[str, str], *, item: str = "") -> Credentials:
    """Find credentials ``name`` in ``env``, then in the credentials file."""
    found = _from_env(name, env, item) or _from_file(name, env, item)
    if found is None:
        prefix = variable_prefix(name)
        file = env.get(FILE_VARIABLE)
        where = f"the file {file!r}" if file else f"the file named by {FILE_VARIABLE} (not set)"
        raise ConfigurationError(
            f"credentials {name!r} not found: set {prefix}_USERNAME and {prefix}_PASSWORD "
            f"in the environment, or add a [{name}] table with username and password to {where}",
            item=item or None, key="credentials")
    return found


def _from_env(name: str, env: Mapping[str, str], item: str) -> Credentials | None:
    prefix = variable_prefix(name)
    user, password = env.get(prefix + "_USERNAME"), env.get(prefix + "_PASSWORD")
    if user is None and password is None:
        return None
    if user is None or password is None:
        missing = prefix + ("_USERNAME" if user is None else "_PASSWORD")
        raise ConfigurationError(f"credentials {name!r}: {missing} is not set",
                                 item=item or None, key="credentials")
    return Credentials(username=user, password=password, name=name)


def _from_file(name: str, env: Mapping[str, str], item: str) -> Credentials | None:
    path = env.get(FILE_VARIABLE)
    if not path:
        return None
    table = _read_table(path, name, item)
    if table is None:
        return None
    user, password = table.get("username"), table.get("password")
    if not isinstance(user, str) or not isinstance(password, str):
        raise ConfigurationError(
            f"credentials {name!r} in {path!r}: the [{name}] table needs username and "
            "password as strings", item=item or None, key="credentials")
    return Credentials(username=user, password=password, name=name)


def _read_table(path: str, name: str, item: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigurationError(
            f"credentials {name!r}: cannot read {FILE_VARIABLE} file {path!r}: {exc.strerror}",
            item=item or None, key="credentials") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(
            f"credentials {name!r}: {FILE_VARIABLE} file {path!r} is not valid TOML: {exc}",
            item=item or None, key="credentials") from None
    table = data.get(name)
    return table if isinstance(table, dict) else None
