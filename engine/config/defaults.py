"""System default settings (docs/settings.md#system-default-settings): the values that differ
between environments, in a TOML file outside the production file, so that one production
file moves unchanged from test to production. Every refusal names the file and the row.
"""
from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigurationError
from engine.settings import Setting, from_base

__all__ = ["ANY", "DefaultRow", "SystemDefaults", "load_defaults"]

ANY = "*"  # matches every production, item or class
ROW_KEYS = ("production", "item", "class", "setting", "value", "description")


@dataclass(frozen=True, kw_only=True)
class DefaultRow:
    """One ``[[defaults]]`` row; ``number`` counts the rows of the file from 1."""

    number: int
    production: str
    item: str
    class_path: str
    setting: str
    value: Any
    description: str = ""

    def matches(self, production: str, item: str, class_path: str) -> bool:
        """Whether this row applies to item ``item`` (of class ``class_path``, as the
        production file names it) of production ``production``."""
        return all(mine in (ANY, theirs) for mine, theirs in (
            (self.production, production), (self.item, item), (self.class_path, class_path)))

    @property
    def rank(self) -> tuple[bool, bool, bool]:
        """How specific the row is: a named production outranks a named item, which
        outranks a named class (Ensemble's order); the greater rank wins."""
        return (self.production != ANY, self.item != ANY, self.class_path != ANY)


@dataclass(frozen=True, kw_only=True)
class SystemDefaults:
    """A defaults file's rows (only the rows of one production, after
    :meth:`for_production`)."""

    path: Path
    rows: tuple[DefaultRow, ...]

    def where(self, row: DefaultRow) -> str:
        """``defaults file '/srv/test/defaults.toml', row 3``: how a refusal names a row."""
        return f"defaults file {str(self.path)!r}, row {row.number}"

    def source(self, row: DefaultRow) -> str:
        """``system default (defaults.toml, row 3)``: a value's source on the item page."""
        return f"system default ({self.path.name}, row {row.number})"

    def for_production(self, name: str) -> SystemDefaults:
        """The rows that apply to production ``name``."""
        return SystemDefaults(path=self.path, rows=tuple(
            r for r in self.rows if r.production in (ANY, name)))

    def for_item(self, production: str, item: str, class_path: str,
                 declared: Iterable[Setting]) -> dict[str, DefaultRow]:
        """The row that gives each of the item's ``declared`` settings its system default, by
        setting name; a tie of rank, or an unknown setting of a named item or class, is
        refused."""
        by_name = {name: s for s in declared for name in s.names()}
        chosen: dict[str, DefaultRow] = {}
        for row in self.rows:
            if not row.matches(production, item, class_path):
                continue
            setting = by_name.get(row.setting)
            if setting is None:
                if row.item != ANY or row.class_path != ANY:
                    raise self._unknown(row, [item], by_name)
                continue  # a row for any item: only for the items that have the setting
            best = chosen.get(setting.name)
            if best is not None and best.rank == row.rank:
                raise ConfigurationError(
                    f"{self.where(row)}: gives item {item!r} setting {setting.name!r} as row "
                    f"{best.number} does, with the same production, item and class; keep one")
            if best is None or row.rank > best.rank:
                chosen[setting.name] = row
        return chosen

    def check_settings(self, production: str,
                       items: Iterable[tuple[str, str, tuple[Setting, ...]]]) -> None:
        """Refuse a row whose setting none of the items it matches declares (``items``: name,
        class path, declared settings)."""
        listed = list(items)
        for row in self.rows:
            matched = [(n, d) for n, c, d in listed if row.matches(production, n, c)]
            known = {name: s for _, d in matched for s in d for name in s.names()}
            if matched and row.setting not in known:
                raise self._unknown(row, [n for n, _ in matched], known)

    def _unknown(self, row: DefaultRow, items: list[str],
                 known: Mapping[str, Setting]) -> ConfigurationError:
        canonical = sorted({s.name for s in known.values()})
        guess = difflib.get_close_matches(row.setting, list(known), n=1, cutoff=0.6)
        hint = f" Did you mean {known[guess[0]].name!r}?" if guess else ""
        whose = f"item {items[0]!r}" if len(items) == 1 else "any of the items " + ", ".join(
            repr(i) for i in items)
        return ConfigurationError(
            f"{self.where(row)}: setting {row.setting!r}: unknown setting of {whose}.{hint} "
            f"Allowed: {', '.join(canonical)}")

    def value(self, row: DefaultRow, setting: Setting, item: str) -> Any:
        """Row ``row``'s value for ``setting`` of ``item``, checked as the file's is."""
        try:
            setting.clean(row.value, item, row.setting)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.where(row)}: {exc}") from exc
        return from_base(row.value, self.path.parent) if setting.path else row.value


def load_defaults(path: Path) -> SystemDefaults:
    """Read and check the defaults file at ``path`` (its rows' keys; their settings are
    checked against the items' classes when the production resolves)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read defaults file {str(path)!r}: {exc.strerror}. "
                                 "Fix [production] defaults or ENCORE_DEFAULTS.") from exc
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"defaults file {str(path)!r} is not UTF-8 text") from exc
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ConfigurationError(f"defaults file {str(path)!r} is not valid TOML: "
                                 f"{exc}") from exc
    unknown = sorted(set(doc) - {"defaults"})
    if unknown:
        raise ConfigurationError(f"defaults file {str(path)!r}: unknown table(s) "
                                 f"{', '.join(unknown)}; rows are [[defaults]] tables")
    raw_rows = doc.get("defaults", [])
    if not isinstance(raw_rows, list):
        raise ConfigurationError(f"defaults file {str(path)!r}: defaults must be an array "
                                 "of tables, [[defaults]]")
    rows = tuple(_row(raw, number, path) for number, raw in enumerate(raw_rows, start=1))
    _refuse_duplicates(rows, path)
    return SystemDefaults(path=path, rows=rows)


def _row(raw: Any, number: int, path: Path) -> DefaultRow:
    where = f"defaults file {str(path)!r}, row {number}"
    if not isinstance(raw, dict):
        raise ConfigurationError(f"{where}: a row is a table, [[defaults]]")
    for key in raw:
        if key not in ROW_KEYS:
            guess = difflib.get_close_matches(key, ROW_KEYS, n=1)
            hint = f" Did you mean {guess[0]!r}?" if guess else ""
            raise ConfigurationError(f"{where}: unknown key {key!r}.{hint} A row has "
                                     f"{', '.join(ROW_KEYS)}")
    for key in ("setting", "value"):
        if key not in raw:
            raise ConfigurationError(f"{where}: missing {key!r}; a row needs a setting and "
                                     "its value")
    names = {key: raw.get(key, ANY) for key in ("production", "item", "class", "setting")}
    for key, name in names.items():
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"{where}: {key} must be a name or '*', got {name!r}")
    if names["setting"] == ANY:
        raise ConfigurationError(f"{where}: setting '*': a row gives one setting; name it "
                                 "(one value cannot fit every setting)")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ConfigurationError(f"{where}: description must be a string")
    return DefaultRow(number=number, production=names["production"], item=names["item"],
                      class_path=names["class"], setting=names["setting"],
                      value=raw["value"], description=description)


def _refuse_duplicates(rows: tuple[DefaultRow, ...], path: Path) -> None:
    seen: dict[tuple[str, str, str, str], int] = {}
    for row in rows:
        key = (row.production, row.item, row.class_path, row.setting)
        if key in seen:
            raise ConfigurationError(
                f"defaults file {str(path)!r}, row {row.number}: the same production, item, "
                f"class and setting as row {seen[key]}; keep one")
        seen[key] = row.number
