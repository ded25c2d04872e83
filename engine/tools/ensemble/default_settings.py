"""An exported ``Ens.Config.DefaultSettings`` table as a defaults file
(docs/settings.md#system-default-settings): each row's production, item and class as the
imported production names them, its setting through the setting table the items' settings
go through (:mod:`.settings_map`), and every row checked as the daemon will check it against
the items it matches — a row Encore cannot take is a ``none`` line of the report, never
dropped silently.

Ensemble exports the table as ``<item>`` elements (the class's XML name), their columns as
attributes (``production``, ``item``, ``class``, ``setting``, ``value``) or as child elements
(by the same names or the columns' own, ``ProductionName`` … ``Deployable``), inside an
``<Export>``, a ``<defaultSettings>`` document or any other wrapper.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.defaults import ANY, DefaultRow, SystemDefaults
from engine.errors import ConfigurationError
from engine.tools.ensemble import toml_out
from engine.tools.ensemble.classes import CLASS_TABLE
from engine.tools.ensemble.errors import SourceError
from engine.tools.ensemble.mapping import ItemPlan, declared_of_plan
from engine.tools.ensemble.report import MAPPED, NONE, NOT_NEEDED, Section
from engine.tools.ensemble.settings_map import (
    COMPOSITE_SETTINGS,
    NO_EQUIVALENT,
    SETTING_TABLE,
)
from engine.tools.ensemble.settings_map import NOT_NEEDED as NOT_NEEDED_SETTINGS
from engine.tools.ensemble.xml_export import MAX_SOURCE_BYTES, parse_xml

ROW_TAGS = ("item", "Ens.Config.DefaultSettings")  # the elements a row is exported as
# Each column: its XML name, then its own name.
COLUMNS = {"production": "ProductionName", "item": "ItemName", "class": "HostClassName",
           "setting": "SettingName", "value": "SettingValue", "description": "Description",
           "deployable": "Deployable"}


@dataclass(frozen=True)
class EnsDefault:
    """One exported row, its columns as Ensemble wrote them; ``number`` counts from 1."""

    number: int
    production: str
    item: str
    class_name: str
    setting: str
    value: str
    description: str = ""
    deployable: str = ""

    @property
    def shown(self) -> str:
        return (f"{self.setting} = {self.value} (row {self.number}: production "
                f"{self.production}, item {self.item}, class {self.class_name})")


def read_default_settings(path: Path) -> list[EnsDefault]:
    """The rows of the exported table at ``path``; SourceError naming the file (and the
    row) when it is not one."""
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise SourceError(f"{path} is larger than {MAX_SOURCE_BYTES} bytes")
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read defaults export {path}: {exc.strerror}") from exc
    root = parse_xml(data, str(path))
    elements = [e for e in root.iter() if e.tag in ROW_TAGS and _column(e, "setting")
                is not None]
    if not elements:
        raise SourceError(f"{path} holds no Ens.Config.DefaultSettings row (an <item> with "
                          "a setting attribute or a SettingName element)")
    return [_row(e, n, path) for n, e in enumerate(elements, start=1)]


def _row(element: Any, number: int, path: Path) -> EnsDefault:
    got = {key: _column(element, key) for key in COLUMNS}
    if not got["setting"]:
        raise SourceError(f"{path}, row {number}: no setting name")
    return EnsDefault(number=number, production=got["production"] or ANY,
                      item=got["item"] or ANY, class_name=got["class"] or ANY,
                      setting=got["setting"] or "", value=got["value"] or "",
                      description=got["description"] or "", deployable=got["deployable"] or "")


def _column(element: Any, key: str) -> str | None:
    for name in (key, COLUMNS[key]):
        if name in element.attrib:
            return str(element.get(name)).strip()
        child = element.find(name)
        if child is not None:
            return (child.text or "").strip()
    return None


@dataclass
class DefaultsPlan:
    """The defaults file to write and its report section."""

    rows: list[dict[str, Any]]
    section: Section

    def text(self, production: str, source: Path) -> str:
        lines = toml_out.comment(f"System default settings of production {production}, "
                                 f"imported from Ensemble's Ens.Config.DefaultSettings "
                                 f"({source.name}) by `encore import ensemble`.")
        for number, row in enumerate(self.rows, start=1):
            lines += ["", f"[[defaults]]  # row {number}",
                      *(f"{toml_out.key(k)} = {toml_out.value(v)}" for k, v in row.items())]
        return "\n".join(lines) + "\n"


def map_defaults(rows: list[EnsDefault], plans: list[ItemPlan], item_classes: Mapping[str, str],
                 production_names: tuple[str, str], title: str) -> DefaultsPlan:
    """Each row as a ``[[defaults]]`` row for the production of ``plans``
    (``item_classes``: each item's Ensemble class → its Encore class as imported;
    ``production_names``: the production's Ensemble class and its Encore name)."""
    section = Section(title, name="the system defaults")
    plan = DefaultsPlan(rows=[], section=section)
    by_ensemble = {name: m.encore for name, m in CLASS_TABLE.items()} | dict(item_classes)
    for row in rows:
        mapped = _map_row(row, by_ensemble, production_names, section)
        if mapped is None:
            continue
        problem = _refusal(mapped, len(plan.rows) + 1, plans, production_names[1])
        if problem:
            section.add(NONE, row.shown, problem)
            continue
        plan.rows.append(mapped)
        section.add(MAPPED, row.shown, f"{mapped['setting']} = {mapped['value']!r} (row "
                    f"{len(plan.rows)}: production {mapped['production']!r}, item "
                    f"{mapped['item']!r}, class {mapped['class']!r})")
    if any(r.deployable for r in rows):
        section.add(NOT_NEEDED, "Deployable", "a defaults file belongs to its environment: "
                    "each environment keeps its own")
    return plan


def _map_row(row: EnsDefault, by_ensemble: Mapping[str, str], names: tuple[str, str],
             section: Section) -> dict[str, Any] | None:
    rule = SETTING_TABLE.get(row.setting)
    if rule is None:
        section.add(NONE, row.shown, _why_not(row.setting))
        return None
    try:
        value = rule.read(row.value)
    except ValueError as exc:
        section.add(NONE, row.shown, f"cannot be read: {exc}")
        return None
    if row.class_name != ANY and row.class_name not in by_ensemble:
        section.add(NONE, row.shown, f"class {row.class_name} is neither in Encore's class "
                    "table nor the class of an item of the production")
        return None
    production = names[1] if row.production in names else row.production
    mapped: dict[str, Any] = {
        "production": production, "item": row.item,
        "class": by_ensemble.get(row.class_name, ANY), "setting": rule.encore,
        "value": value}
    if row.description:
        mapped["description"] = row.description
    return mapped


def _why_not(name: str) -> str:
    if name in COMPOSITE_SETTINGS:
        return (f"part of a setting made of several ({COMPOSITE_SETTINGS[name]}), mapped only "
                "within an item: give it in the item's settings")
    if name in NOT_NEEDED_SETTINGS:
        return f"not needed: {NOT_NEEDED_SETTINGS[name]}"
    if name in NO_EQUIVALENT:
        return f"no equivalent: {NO_EQUIVALENT[name]}"
    return "not a setting Encore has"


def _refusal(mapped: dict[str, Any], number: int, plans: list[ItemPlan],
             production: str) -> str | None:
    """Why the daemon would refuse the row (checked by the defaults file's own rules
    against the items it matches), None when it would not."""
    row = DefaultRow(number=number, production=mapped["production"], item=mapped["item"],
                     class_path=mapped["class"], setting=mapped["setting"],
                     value=mapped["value"])
    defaults = SystemDefaults(path=Path("defaults.toml"), rows=(row,))
    if row.production not in (ANY, production):
        return None  # another production's row: its items are not here to check against
    items = [(p.name, p.class_path, declared_of_plan(p)) for p in plans]
    try:
        defaults.check_settings(production, items)
        for name, class_path, declared in items:
            for chosen in defaults.for_item(production, name, class_path, declared).values():
                setting = next(s for s in declared if chosen.setting in s.names())
                defaults.value(chosen, setting, name)
    except ConfigurationError as exc:
        return f"Encore would refuse it: {str(exc).split(': ', 1)[-1]}"
    return None
