"""Each setting is declared once: a typed settings class declares its settings in its own
fields (engine.settings.setting), and no Setting tuple, SETTINGS attribute or added setting
declares one of them again."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections import defaultdict
from types import ModuleType

import pytest

import adapters
import engine
import operations
from engine.host import BusinessHost
from engine.settings import OPERATION, Setting, TypedSettings, added_settings, field_setting

# Names that two different settings share, each in its own table: never both in one table.
SHARED_NAMES = {
    "name": "[production] name and an item's name",
    "host": "[portal] and [inbound]",
    "port": "[portal] and [inbound]",
    "tls_cert": "[portal] and [inbound]",
    "tls_key": "[portal] and [inbound]",
    "schedule": "an operation's window (a table) and a service's cron string",
    "response_timeout": "an inbound service's and an outbound adapter's",
    "auth": "an inbound service's and the SOAP adapter's",
    "wsdl": "the inbound SOAP service's (a local file) and the SOAP adapter's",
    "failure_timeout": "a process's: the operation's with -1 (forever) as its default",
}


def _modules() -> list[ModuleType]:
    found = []
    for package in (engine, adapters, operations):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith("__main__"):
                found.append(importlib.import_module(info.name))
    return found


MODULES = _modules()
CLASSES = {v for m in MODULES for v in vars(m).values()
           if isinstance(v, type) and v.__module__ == m.__name__}
TYPED = sorted((c for c in CLASSES if issubclass(c, TypedSettings)
                and dataclasses.is_dataclass(c)), key=lambda c: c.__qualname__)


def tables() -> dict[str, tuple[Setting, ...]]:
    """Every group of settings accepted together, by where it is declared."""
    found: dict[str, tuple[Setting, ...]] = {"added to every operation": added_settings(OPERATION)}
    for module in MODULES:
        for name, value in vars(module).items():
            if isinstance(value, Setting):
                found[f"{module.__name__}.{name}"] = (value,)
            elif (isinstance(value, tuple) and value
                  and all(isinstance(s, Setting) for s in value)):
                found[f"{module.__name__}.{name}"] = value
    for cls in CLASSES:
        where = f"{cls.__module__}.{cls.__qualname__}"
        if issubclass(cls, TypedSettings):
            found[where] = cls.DECLARED
        if isinstance(getattr(cls, "SETTINGS", None), tuple):
            found[f"{where}.SETTINGS"] = cls.SETTINGS
        if issubclass(cls, BusinessHost):
            found[f"{where}.declared_settings()"] = cls.declared_settings()
    return found


def test_the_typed_settings_classes_are_found() -> None:
    names = {c.__qualname__ for c in TYPED}
    assert {"RetrySettings", "OperationSettings", "GuardSettings", "AdapterSettings",
            "XmlLimits", "ProductionSettings", "PortalConfig", "InboundConfig"} <= names


@pytest.mark.parametrize("cls", TYPED, ids=lambda c: c.__qualname__)
def test_a_typed_settings_class_declares_each_of_its_settings_in_its_field(
        cls: type[TypedSettings]) -> None:
    own = [f for f in dataclasses.fields(cls) if f.name in vars(cls).get("__annotations__", {})]
    declared = {f.name: field_setting(f) for f in own}
    bare = [name for name, setting in declared.items() if setting is None]
    # a class adds settings or other fields, never both: a bare field beside settings is a
    # setting declared elsewhere
    assert bare in ([], list(declared))
    assert all(s is None or s.name == name for name, s in declared.items())
    assert cls.DECLARED == tuple(s for f in dataclasses.fields(cls)
                                 if (s := field_setting(f)) is not None)


def test_every_setting_name_is_declared_once() -> None:
    declarations: dict[str, dict[int, Setting]] = defaultdict(dict)
    for group in tables().values():
        for setting in group:
            declarations[setting.name][id(setting)] = setting
    twice = {name: len(found) for name, found in declarations.items() if len(found) > 1}
    assert twice == dict.fromkeys(SHARED_NAMES, 2)


def test_a_table_names_each_setting_once() -> None:
    repeated = {where: sorted({s.name for s in group
                               if [t.name for t in group].count(s.name) > 1})
                for where, group in tables().items()}
    assert {where: names for where, names in repeated.items() if names} == {}
