"""The production file (TOML): what items run, with which settings (DESIGN.md §4).

Loading validates everything up front — unknown keys (with the closest valid key suggested),
wrong types and ranges, classes that do not import, duplicate item names — so that a daemon
never starts with a production it would fail on later.
"""
from __future__ import annotations

import importlib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ConfigurationError
from engine.host import BusinessHost
from engine.settings import Setting, validate_settings
from engine.store.database import DEFAULT_DATABASE_URL
from engine.user_modules import add_production_directory, shadowing_hint

DEFAULT_PRODUCTION_FILE = "production.toml"

PRODUCTION_SETTINGS: tuple[Setting, ...] = (
    Setting(name="name", kind=str, default="Production"),
    Setting(name="database", kind=str, default=DEFAULT_DATABASE_URL,
            help="SQLAlchemy URL; ENCORE_DATABASE_URL overrides it"),
    Setting(name="lease_seconds", kind=float, default=30.0, minimum=1,
            help="seconds a claim outlives its daemon's last heartbeat"),
    Setting(name="poll_interval", kind=float, default=0.5, minimum=0.01,
            help="seconds an idle worker waits before looking at its queue again"),
    Setting(name="shutdown_timeout", kind=float, default=30.0, minimum=0,
            help="seconds a stop waits for attempts in flight"),
    Setting(name="metrics_port", kind=int, default=0, minimum=0,
            help="port of the Prometheus metrics and /healthz endpoint; 0 = none"),
    Setting(name="metrics_host", kind=str, default="127.0.0.1",
            help="address the metrics endpoint listens on (loopback by default)"),
    Setting(name="alert_item", kind=str, default="",
            help="item that receives every Alert as a message (e.g. an HTTP webhook); '' = none"),
    Setting(name="retention_days", kind=float, default=0, minimum=0,
            help="days finished messages are kept before the scheduler purges them; 0 = forever"),
)

ITEM_KEYS: tuple[Setting, ...] = (
    Setting(name="name", kind=str),
    Setting(name="class", kind=str),
    Setting(name="pool_size", kind=int, default=1, minimum=1),
    Setting(name="enabled", kind=bool, default=True),
    Setting(name="settings", kind=dict, default=None),
)


@dataclass(frozen=True, kw_only=True)
class ItemConfig:
    """One configured item: a host class with its validated settings."""

    name: str
    class_path: str
    cls: type[BusinessHost]
    pool_size: int = 1
    enabled: bool = True
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ProductionConfig:
    """A loaded production file."""

    name: str
    database: str
    items: tuple[ItemConfig, ...]
    lease_seconds: float = 30.0
    poll_interval: float = 0.5
    shutdown_timeout: float = 30.0
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    retention_days: float = 0
    alert_item: str = ""
    path: Path | None = None

    def item(self, name: str) -> ItemConfig:
        for item in self.items:
            if item.name == name:
                return item
        known = ", ".join(i.name for i in self.items) or "none"
        raise ConfigurationError(f"no item named {name!r} in the production (items: {known})")


def find_production_file(option: str | None, env: Mapping[str, str]) -> Path:
    """``-p PATH``, else ``$ENCORE_PRODUCTION``, else ``./production.toml``."""
    return Path(option or env.get("ENCORE_PRODUCTION") or DEFAULT_PRODUCTION_FILE)


def load_production(path: Path, env: Mapping[str, str] | None = None) -> ProductionConfig:
    """Read and validate the production file at ``path``. Its directory goes at the end of
    ``sys.path``, so that the classes it names may live beside it
    (:mod:`engine.user_modules`)."""
    env = os.environ if env is None else env
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read production file {str(path)!r}: {exc.strerror}. "
                                 "Pass -p PATH or set ENCORE_PRODUCTION.") from exc
    add_production_directory(path)
    return parse_production(text, env=env, path=path)


def parse_production(text: str, *, env: Mapping[str, str],
                     path: Path | None = None) -> ProductionConfig:
    """Validate production-file ``text``; ``env`` may override the database URL."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"production file {str(path or '<text>')!r} is not valid TOML: "
                                 f"{exc}") from exc
    unknown = sorted(set(doc) - {"production", "items"})
    if unknown:
        raise ConfigurationError(f"unknown top-level table(s) {', '.join(unknown)}; "
                                 "expected [production] and [[items]]")
    prod = validate_settings("[production]", doc.get("production", {}), PRODUCTION_SETTINGS)
    items = _load_items(doc.get("items", []))
    if prod["alert_item"] and prod["alert_item"] not in {i.name for i in items}:
        raise ConfigurationError(f"alert_item {prod['alert_item']!r} is not an item of the "
                                 f"production", item="[production]", key="alert_item")
    database = env.get("ENCORE_DATABASE_URL") or prod["database"]
    return ProductionConfig(name=prod["name"], database=database, items=items,
                            lease_seconds=prod["lease_seconds"],
                            poll_interval=prod["poll_interval"],
                            shutdown_timeout=prod["shutdown_timeout"],
                            metrics_port=prod["metrics_port"], metrics_host=prod["metrics_host"],
                            retention_days=prod["retention_days"],
                            alert_item=prod["alert_item"], path=path)


def _load_items(raw_items: Any) -> tuple[ItemConfig, ...]:
    if not isinstance(raw_items, list):
        raise ConfigurationError("items must be an array of tables: [[items]]")
    items: list[ItemConfig] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_items, start=1):
        label = str(raw.get("name", f"#{index}")) if isinstance(raw, dict) else f"#{index}"
        for required in ("name", "class"):
            if not isinstance(raw, dict) or required not in raw:
                raise ConfigurationError(f"missing required key {required!r}", item=label)
        keys = validate_settings(label, raw, ITEM_KEYS)
        if keys["name"] in seen:
            raise ConfigurationError("duplicate item name; every item needs a unique name",
                                     item=keys["name"])
        seen.add(keys["name"])
        cls = resolve_class(keys["class"], item=keys["name"])
        settings = validate_settings(keys["name"], keys["settings"] or {},
                                     cls.declared_settings())
        items.append(ItemConfig(name=keys["name"], class_path=keys["class"], cls=cls,
                                pool_size=keys["pool_size"], enabled=keys["enabled"],
                                settings=settings))
    return tuple(items)


def resolve_class(path: str, *, item: str) -> type[BusinessHost]:
    """Resolve ``module:Class`` to a BusinessHost subclass, naming the key on failure."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{path!r} is not of the form 'module:Class'", item=item,
                                 key="class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"module {module_name!r} cannot be imported: {exc}"
                                 f"{shadowing_hint(module_name)}", item=item, key="class") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise ConfigurationError(f"module {module_name!r} has no {attr!r}"
                                 f"{shadowing_hint(module_name)}", item=item, key="class")
    if not (isinstance(cls, type) and issubclass(cls, BusinessHost)):
        raise ConfigurationError(
            f"{path!r} is not a BusinessOperation or BusinessService class", item=item, key="class")
    return cls
