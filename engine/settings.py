"""Declared settings, their validation at load time, and the typed objects built from them.

A setting is declared once, as a field of a :class:`TypedSettings` class:
``response_timeout: float = setting(kind=float, default=30, minimum=0, help="...")``. The
field's :class:`Setting` is the one home of its default, type, bounds and help; the field has
no default of its own, and the class's ``DECLARED`` lists its fields' settings in order. What
has no typed object (a user's host class) declares plain :class:`Setting` tuples.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from engine.errors import ConfigurationError

OPERATION = "operation"
_KEY = "encore.setting"  # the field metadata that holds a field's declaration

_ADDED: dict[str, dict[str, Setting]] = {}


def camel_case(name: str) -> str:
    """``response_timeout`` → ``ResponseTimeout`` (Ensemble's spelling)."""
    return "".join(part.capitalize() for part in name.split("_"))


@dataclass(frozen=True, kw_only=True, eq=False)
class Setting:
    """One accepted setting. ``check`` returns the cleaned value or raises ValueError;
    ``path``: a relative value is read from the production file's directory."""

    name: str
    kind: type | tuple[type, ...]
    default: Any = None
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    allow: tuple[Any, ...] = ()  # values accepted besides the range (e.g. -1 = forever)
    choices: tuple[Any, ...] = ()
    check: Callable[[Any], Any] | None = None
    aliases: tuple[str, ...] = field(default=())
    path: bool = False

    def names(self) -> tuple[str, ...]:
        return (self.name, camel_case(self.name), *self.aliases)

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        text = " or ".join(_kind_name(k) for k in kinds)
        if self.minimum is not None and self.maximum is not None:
            text += f" from {self.minimum:g} to {self.maximum:g}"
        elif self.minimum is not None:
            text += f" ≥ {self.minimum:g}"
        elif self.maximum is not None:
            text += f" ≤ {self.maximum:g}"
        if self.allow:
            text += " (or " + ", ".join(repr(a) for a in self.allow) + ")"
        return text

    def clean(self, value: Any, item: str, key: str | None = None) -> Any:
        """``value`` validated and normalised, or ConfigurationError naming ``key``. TOML's
        ``nan`` and ``inf`` are refused: they would pass any range check."""
        named = key or self.name
        bad = _not_finite(value)
        if bad is not None:
            raise ConfigurationError(
                f"{bad!r} is not a finite number (NaN and infinities are refused); expected "
                f"{self.describe()}", item=item, key=named)
        if value in self.allow and type(value) is not bool:
            return value
        if value is self.default or (value is None and self.default is None):
            return value
        if not _is_kind(value, self.kind):
            raise ConfigurationError(
                f"expected {self.describe()}, got {type(value).__name__} {value!r}",
                item=item, key=named)
        if self.choices and value not in self.choices:
            raise ConfigurationError(
                f"{value!r} is not allowed; expected {self.describe()}", item=item, key=named)
        if isinstance(value, (int, float)) and not self._in_range(value):
            raise ConfigurationError(
                f"{value!r} is out of range; expected {self.describe()}", item=item, key=named)
        if self.check is not None:
            try:
                value = self.check(value)
            except ValueError as exc:
                raise ConfigurationError(str(exc), item=item, key=named) from exc
        return value


    def _in_range(self, value: float) -> bool:
        return ((self.minimum is None or value >= self.minimum)
                and (self.maximum is None or value <= self.maximum))


def _not_finite(value: Any) -> float | None:
    """The first NaN or infinity in ``value`` or in its (nested) lists; None if none."""
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    if isinstance(value, (list, tuple)):
        for element in value:
            bad = _not_finite(element)
            if bad is not None:
                return bad
    return None


def _kind_name(kind: type) -> str:
    return {float: "number", int: "integer", str: "string", bool: "true/false",
            list: "list", dict: "table"}.get(kind, kind.__name__)


def _is_kind(value: Any, kind: type | tuple[type, ...]) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return isinstance(value, kinds)


def add_settings(kind: str, settings: Iterable[Setting]) -> None:
    """Declare ``settings`` for every item of ``kind``, beside those of its class (the
    delivery guards' settings, which the kernel does not name)."""
    added = _ADDED.setdefault(kind, {})
    for setting in settings:
        added[setting.name] = setting


def added_settings(kind: str) -> tuple[Setting, ...]:
    """The settings declared for every item of ``kind`` (:func:`add_settings`)."""
    return tuple(_ADDED.get(kind, {}).values())


def _normalise_key(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


def validate_settings(item: str, raw: Mapping[str, Any], declared: Iterable[Setting], *,
                      base: Path | None = None) -> dict[str, Any]:
    """Check ``raw`` against ``declared``; return every declared name with its value.
    ``base``: the directory relative ``path`` settings are read from."""
    by_name: dict[str, Setting] = {}
    for setting in declared:
        for name in setting.names():
            by_name[name] = setting
    result: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, value in raw.items():
        found = by_name.get(key)
        if found is None:
            raise ConfigurationError(_unknown_key_text(key, by_name), item=item, key=key)
        if found.name in seen:
            raise ConfigurationError(
                f"given twice, as {seen[found.name]!r} and {key!r}", item=item, key=found.name)
        seen[found.name] = key
        value = found.clean(value, item, key)
        result[found.name] = from_base(value, base) if found.path else value
    for setting in by_name.values():
        result.setdefault(setting.name, copy.deepcopy(setting.default))
    return result


def from_base(value: Any, base: Path | None) -> Any:
    """``value`` made absolute from ``base`` if it is a relative file path (not a URL)."""
    if base is None or not isinstance(value, str) or not value:
        return value
    if urlsplit(value).scheme or os.path.isabs(value):
        return value
    return os.path.abspath(os.path.join(base, value))


def _unknown_key_text(key: str, by_name: Mapping[str, Setting]) -> str:
    canonical = sorted({s.name for s in by_name.values()})
    folded = {_normalise_key(n): by_name[n].name for n in by_name}
    guess = difflib.get_close_matches(_normalise_key(key), list(folded), n=1, cutoff=0.6)
    hint = f" Did you mean {folded[guess[0]]!r}?" if guess else ""
    return f"unknown setting.{hint} Allowed: {', '.join(canonical)}"


class _Declaration:
    """What :func:`setting` puts in a field: the Setting's attributes, made a Setting named
    after the field the first time the field is read."""

    def __init__(self, options: dict[str, Any], bound: Setting | None = None) -> None:
        self.options = options
        self.bound = bound

    def named(self, name: str) -> Setting:
        if self.bound is None:
            self.bound = Setting(name=name, **self.options)
        return self.bound


def setting(**options: Any) -> Any:
    """A :class:`TypedSettings` field declaring the setting of its name; ``options`` are
    :class:`Setting`'s (``kind``, ``default``, ``help``, ``minimum``, ...). The field itself
    has no default: :meth:`TypedSettings.from_validated` fills it in."""
    return field(metadata={_KEY: _Declaration(options)})


def shared(declared: Setting) -> Any:
    """A field for a setting declared in another class's field, that two typed objects read."""
    return field(metadata={_KEY: _Declaration({}, declared)})


def field_setting(of: dataclasses.Field[Any]) -> Setting | None:
    """The setting the dataclass field ``of`` declares; None for a field that is no setting."""
    declaration = of.metadata.get(_KEY)
    return None if declaration is None else declaration.named(of.name)


def declared_in(cls: type, *names: str) -> tuple[Setting, ...]:
    """The settings named ``names`` of the fields of typed settings class ``cls``, in order."""
    found = {s.name: s for s in _declared(cls)}
    return tuple(found[name] for name in names)


@functools.cache
def _declared(cls: type) -> tuple[Setting, ...]:
    if not dataclasses.is_dataclass(cls):
        return ()
    found = (field_setting(f) for f in dataclasses.fields(cls))
    return tuple(s for s in found if s is not None)


class _Fields:
    """``DECLARED``: the settings a typed settings class's fields declare, in field order."""

    def __get__(self, instance: object, owner: type) -> tuple[Setting, ...]:
        return _declared(owner)


class TypedSettings:
    """Base of the typed, frozen settings objects: keyword-only dataclasses whose fields
    declare their settings (:func:`setting`)."""

    __slots__ = ()
    DECLARED = _Fields()

    @classmethod
    def from_validated(cls, validated: Mapping[str, Any], **others: Any) -> Self:
        """The object for ``validated`` settings; absent fields take the declared default.
        ``others``: the fields that are not settings."""
        values = dict(others)
        for declared in cls.DECLARED:
            value = (validated[declared.name] if declared.name in validated
                     else copy.deepcopy(declared.default))
            values[declared.name] = _typed(value, declared)
        return cls(**values)

    @classmethod
    def defaults(cls) -> Self:
        """The object for an empty settings table: every field its declared default."""
        return cls.from_validated({})


def _typed(value: Any, declared: Setting) -> Any:
    """``value`` as its field holds it (an int as a float, a list as a tuple)."""
    if declared.kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list):
        return tuple(value)
    return value
