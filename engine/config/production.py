"""The production file (TOML): what items run, with which settings (docs/settings.md).

Everything is validated up front, so a daemon never starts with a production it would fail
on later. :func:`read_outline` checks what needs no class, importing nothing the items name
(commands that only read the database stay quick); :meth:`ProductionOutline.resolve` then
imports the classes and validates their settings.
"""
from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from engine.config.defaults import SystemDefaults, load_defaults
from engine.config.sources import CLASS_DEFAULT
from engine.config.user_modules import add_production_directory, resolve_class
from engine.delivery import guards as _guards  # noqa: F401 - adds the guards' settings
from engine.errors import ConfigurationError
from engine.otel import tracing_wanted
from engine.settings import Setting, TypedSettings, setting, validate_settings
from engine.store.database import DEFAULT_DATABASE_URL

if TYPE_CHECKING:
    from adapters.settings import AdapterSettings
    from engine.host import BusinessHost, OperationSettings
    from engine.retry import RetrySettings

__all__ = ["DEFAULT_PRODUCTION_FILE", "INBOUND_SETTINGS", "ITEM_KEYS", "PORTAL_SETTINGS",
           "PRODUCTION_SETTINGS", "InboundConfig", "ItemConfig", "ItemEntry", "PortalConfig",
           "ProductionConfig", "ProductionOutline",
           "ProductionSettings", "absolute_sqlite_url", "find_production_file",
           "load_production", "parse_outline", "parse_production", "read_outline",
           "resolve_class"]

DEFAULT_PRODUCTION_FILE = "production.toml"

# Upper bounds: past them a value is a typo, and would overflow a date, a wait or a column
# later instead of failing at load time.
MAX_PORT = 65535
MAX_LEASE_SECONDS = 86400.0
MAX_POLL_INTERVAL = 300.0
MAX_SHUTDOWN_TIMEOUT = 86400.0
MAX_RETENTION_DAYS = 36500.0
MAX_POOL_SIZE = 1000
MAX_CONNECTIONS = 1_000_000
# the name columns are String(200); a FIFO item's lease is named "item:<name>"
MAX_PRODUCTION_NAME = 200
MAX_ITEM_NAME = 200 - len("item:")

DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_POLL_INTERVAL = 0.5
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_PASSWORD_MIN_LENGTH = 12

@dataclass(frozen=True, kw_only=True)
class ProductionSettings(TypedSettings):
    """The ``[production]`` table, validated, environment overrides applied."""

    name: str = setting(kind=str, default="Production",
                        check=lambda name: _fits_column(name, MAX_PRODUCTION_NAME))
    database: str = setting(kind=str, default=DEFAULT_DATABASE_URL,
                            help="SQLAlchemy URL; ENCORE_DATABASE_URL overrides it")
    lease_seconds: float = setting(
        kind=float, default=DEFAULT_LEASE_SECONDS, minimum=1, maximum=MAX_LEASE_SECONDS,
        help="seconds a claim outlives its daemon's last heartbeat")
    poll_interval: float = setting(
        kind=float, default=DEFAULT_POLL_INTERVAL, minimum=0.01, maximum=MAX_POLL_INTERVAL,
        help="seconds an idle item's dispatcher waits before looking at its queue again "
             "(work announced in this process, or by NOTIFY on PostgreSQL, wakes it sooner)")
    shutdown_timeout: float = setting(
        kind=float, default=DEFAULT_SHUTDOWN_TIMEOUT, minimum=0, maximum=MAX_SHUTDOWN_TIMEOUT,
        help="seconds a stop waits for attempts in flight")
    metrics_port: int = setting(
        kind=int, default=0, minimum=0, maximum=MAX_PORT,
        help="port of the Prometheus metrics and /healthz endpoint; 0 = none")
    metrics_host: str = setting(
        kind=str, default=DEFAULT_METRICS_HOST,
        help="address the metrics endpoint listens on (loopback by default)")
    alert_item: str = setting(
        kind=str, default="",
        help="item that receives every Alert as a message (e.g. an HTTP webhook); '' = none")
    retention_days: float = setting(
        kind=float, default=0, minimum=0, maximum=MAX_RETENTION_DAYS,
        help="days finished messages are kept before the scheduler purges them; 0 = forever")
    otel: bool = setting(
        kind=bool, default=False,
        help="OpenTelemetry tracing (the encore-engine[otel] extra); the standard OTEL_* "
             "variables turn it on too, OTEL_SDK_DISABLED=true off")


PRODUCTION_SETTINGS: tuple[Setting, ...] = ProductionSettings.DECLARED

# not a field of ProductionSettings: its `defaults()` is the TypedSettings constructor
DEFAULTS_FILE = Setting(name="defaults", kind=str, default="", path=True,
                        help="the system default settings file (TOML); ENCORE_DEFAULTS "
                             "overrides it; '' = none")

@dataclass(frozen=True, slots=True, kw_only=True)
class PortalConfig(TypedSettings):
    """The ``[portal]`` table: where the management portal is served."""

    host: str = setting(kind=str, default="127.0.0.1",
                        help="address the management portal listens on (loopback by default)")
    port: int = setting(kind=int, default=8080, minimum=1, maximum=MAX_PORT,
                        help="port of the management portal and JSON API")
    tls_cert: str = setting(kind=str, default="", path=True,
                            help="PEM certificate file; with tls_key, the portal serves HTTPS")
    tls_key: str = setting(kind=str, default="", path=True,
                           help="PEM private key file of tls_cert")
    forwarded_allow_ips: tuple[str, ...] = setting(
        kind=(list, tuple), default=(), check=lambda value: _proxy_addresses(value),
        help="addresses or networks of the proxies whose X-Forwarded-For names the "
             "client (login limits count per client address); none by default")
    max_waiters: int = setting(
        kind=int, default=100, minimum=0, maximum=100_000,
        help="intake calls with ?wait that may wait at once; the next gets 503")
    password_min_length: int = setting(
        kind=int, default=DEFAULT_PASSWORD_MIN_LENGTH, minimum=8, maximum=1024,
        help="characters a portal user's password has at least (the portal's "
             "administration and `encore user add` refuse shorter ones)")
    max_connections: int = setting(
        kind=int, default=0, minimum=0, maximum=MAX_CONNECTIONS,
        help="connections the portal holds open at once, the next is reset; 0 = sized "
             "from the open-file limit (RLIMIT_NOFILE) less a reserve for the daemon's "
             "own files")
    max_connections_per_client: int = setting(
        kind=int, default=0, minimum=0, maximum=MAX_CONNECTIONS,
        help="connections one client address holds open at once (the proxies of "
             "forwarded_allow_ips are spared); 0 = a quarter of max_connections, at "
             "most 64")
    read_timeout: float = setting(
        kind=float, default=10.0, minimum=0.1, maximum=300,
        help="seconds a client has to send a whole request, headers and body, or to "
             "take an answer it stopped reading; then the connection is closed")
    keepalive_timeout: float = setting(kind=float, default=5.0, minimum=0.1, maximum=300,
                                       help="seconds an idle keep-alive connection stays open")

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundConfig(TypedSettings):
    """The ``[inbound]`` table: where the inbound services are served."""

    host: str = setting(kind=str, default="127.0.0.1",
                        help="address the inbound services listen on (loopback by default)")
    port: int = setting(kind=int, default=8081, minimum=1, maximum=MAX_PORT,
                        help="port of the inbound services (SOAP and HTTP)")
    tls_cert: str = setting(
        kind=str, default="", path=True,
        help="PEM certificate file; with tls_key, the inbound services serve HTTPS")
    tls_key: str = setting(kind=str, default="", path=True,
                           help="PEM private key file of tls_cert")

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)


PORTAL_SETTINGS: tuple[Setting, ...] = PortalConfig.DECLARED
INBOUND_SETTINGS: tuple[Setting, ...] = InboundConfig.DECLARED


ITEM_KEYS: tuple[Setting, ...] = (
    Setting(name="name", kind=str, check=lambda name: _fits_column(name, MAX_ITEM_NAME)),
    Setting(name="class", kind=str),
    Setting(name="pool_size", kind=int, default=1, minimum=1, maximum=MAX_POOL_SIZE),
    Setting(name="enabled", kind=bool, default=True),
    Setting(name="settings", kind=dict, default=None),
)


@dataclass(frozen=True, kw_only=True)
class ItemConfig:
    """One configured item: a host class with its validated settings (by snake_case name),
    the typed objects built from them once, and where each value came from (``sources``)."""

    name: str
    class_path: str
    cls: type[BusinessHost]
    pool_size: int
    enabled: bool
    settings: Mapping[str, Any]
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    retry_settings: RetrySettings | None = field(init=False, default=None)
    operation_settings: OperationSettings | None = field(init=False, default=None)
    adapter_settings: AdapterSettings | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        for name, value in self.cls.settings_objects(self.settings).items():
            object.__setattr__(self, name, value)


@dataclass(frozen=True, kw_only=True)
class ItemEntry:
    """One item as the file lists it, its class not yet imported. ``base``: the directory
    relative paths are read from; ``defaults``: the production's system defaults."""

    name: str
    class_path: str
    pool_size: int
    enabled: bool
    raw_settings: Mapping[str, Any]
    base: Path | None = None
    production: str = ""
    defaults: SystemDefaults | None = None

    def resolve(self) -> ItemConfig:
        """Import the class and validate the file's settings, then the system defaults, against
        it."""
        cls = resolve_class(self.class_path, item=self.name)
        declared = cls.declared_settings()
        raw = dict(self.raw_settings)
        sources = _file_sources(raw, declared)
        if self.defaults is not None:
            by_name = {s.name: s for s in declared}
            rows = self.defaults.for_item(self.production, self.name, self.class_path,
                                          declared)
            for name, row in rows.items():
                if name not in sources:
                    raw[name] = self.defaults.value(row, by_name[name], self.name)
                    sources[name] = self.defaults.source(row)
        settings = validate_settings(self.name, raw, declared, base=self.base)
        return ItemConfig(name=self.name, class_path=self.class_path, cls=cls,
                          pool_size=self.pool_size, enabled=self.enabled, settings=settings,
                          sources={s.name: sources.get(s.name, CLASS_DEFAULT)
                                   for s in declared})


def _file_sources(raw: Mapping[str, Any], declared: tuple[Setting, ...]) -> dict[str, str]:
    """``file`` or ``alias`` for each declared setting the file gives."""
    sources: dict[str, str] = {}
    for s in declared:
        if s.name in raw:
            sources[s.name] = "file"
        elif any(name in raw for name in s.names()):
            sources[s.name] = "alias"
    return sources


@dataclass(frozen=True, kw_only=True)
class ProductionFile(ProductionSettings):
    """The ``[production]`` settings with what else the file gives besides its items."""

    portal: PortalConfig | None = None
    inbound: InboundConfig | None = None
    path: Path | None = None
    system_defaults: SystemDefaults | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        """The files the production was read from: its own, then its defaults file."""
        named = (self.path, self.system_defaults.path if self.system_defaults else None)
        return tuple(p for p in named if p is not None)


@dataclass(frozen=True, kw_only=True)
class ProductionConfig(ProductionFile):
    """A loaded production file: every item's class imported and its settings validated."""

    items: tuple[ItemConfig, ...]

    def item(self, name: str) -> ItemConfig:
        for item in self.items:
            if item.name == name:
                return item
        raise _no_such_item(name, self.items)


@dataclass(frozen=True, kw_only=True)
class ProductionOutline(ProductionFile):
    """A production file read without importing the classes its items name."""

    entries: tuple[ItemEntry, ...]

    def entry(self, name: str) -> ItemEntry:
        """The item ``name`` as listed; ConfigurationError naming the items otherwise."""
        for entry in self.entries:
            if entry.name == name:
                return entry
        raise _no_such_item(name, self.entries)

    def item(self, name: str) -> ItemConfig:
        """Item ``name`` resolved (its class imported), as :meth:`ProductionConfig.item`."""
        return self.entry(name).resolve()

    def refusals(self) -> list[str]:
        """What loading each item would refuse, one text per item."""
        found = []
        for entry in self.entries:
            try:
                entry.resolve()
            except ConfigurationError as exc:
                found.append(str(exc))
        return found

    def resolve(self) -> ProductionConfig:
        """The whole production: every item's class imported and its settings validated."""
        common = {f.name: getattr(self, f.name) for f in dataclasses.fields(ProductionFile)}
        items = tuple(e.resolve() for e in self.entries)
        if self.system_defaults is not None:
            self.system_defaults.check_settings(self.name, [
                (i.name, i.class_path, i.cls.declared_settings()) for i in items])
        _check_targets(items)
        _check_inbound(items, self.inbound)
        return ProductionConfig(**common, items=items)


def _fits_column(name: str, limit: int) -> str:
    """``name``, if the database can store it (at most ``limit`` characters)."""
    if len(name) > limit:
        raise ValueError(f"{len(name)} characters is too long; a name has at most {limit}, "
                         "to fit the database's columns")
    return name


def _no_such_item(name: str, items: tuple[ItemConfig | ItemEntry, ...]) -> ConfigurationError:
    known = ", ".join(i.name for i in items) or "none"
    return ConfigurationError(f"no item named {name!r} in the production (items: {known})")


def find_production_file(option: str | None, env: Mapping[str, str]) -> Path:
    """``-p PATH``, else ``$ENCORE_PRODUCTION``, else ``./production.toml``."""
    return Path(option or env.get("ENCORE_PRODUCTION") or DEFAULT_PRODUCTION_FILE)


def load_production(path: Path, env: Mapping[str, str] | None = None) -> ProductionConfig:
    """Read and validate the production file at ``path``, every item's class imported."""
    return read_outline(path, env).resolve()


def read_outline(path: Path, env: Mapping[str, str] | None = None) -> ProductionOutline:
    """Read the production file at ``path`` and check what needs no class."""
    env = os.environ if env is None else env
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read production file {str(path)!r}: {exc.strerror}. "
                                 "Pass -p PATH or set ENCORE_PRODUCTION.") from exc
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"production file {str(path)!r} is not UTF-8 text (byte "
                                 f"0x{exc.object[exc.start]:02x} at offset {exc.start}); save "
                                 "it as UTF-8, as TOML requires") from exc
    add_production_directory(path)
    return parse_outline(text, env=env, path=path)


def parse_production(text: str, *, env: Mapping[str, str],
                     path: Path | None = None) -> ProductionConfig:
    """Validate production-file ``text``; ``env`` may override the database URL."""
    return parse_outline(text, env=env, path=path).resolve()


def parse_outline(text: str, *, env: Mapping[str, str],
                  path: Path | None = None) -> ProductionOutline:
    """Check production-file ``text`` without importing its classes."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"production file {str(path or '<text>')!r} is not valid TOML: "
                                 f"{exc}") from exc
    except RecursionError as exc:
        raise ConfigurationError(f"production file {str(path or '<text>')!r} nests arrays or "
                                 "tables too deep to read") from exc
    unknown = sorted(set(doc) - {"production", "items", "portal", "inbound"})
    if unknown:
        raise ConfigurationError(f"unknown top-level table(s) {', '.join(unknown)}; "
                                 "expected [production], [[items]], [portal] and [inbound]")
    base = path.parent if path is not None else None
    prod = validate_settings("[production]", doc.get("production", {}),
                             (*PRODUCTION_SETTINGS, DEFAULTS_FILE), base=base)
    defaults = _system_defaults(prod, env)
    entries = _read_items(doc.get("items", []), base, prod["name"], defaults)
    if prod["alert_item"] and prod["alert_item"] not in {e.name for e in entries}:
        raise ConfigurationError(f"alert_item {prod['alert_item']!r} is not an item of the "
                                 f"production", item="[production]", key="alert_item")
    from_env = env.get("ENCORE_DATABASE_URL")
    if from_env:
        prod["database"] = absolute_sqlite_url(from_env, Path.cwd())
    elif path is not None:
        prod["database"] = absolute_sqlite_url(prod["database"], path.parent)
    prod["otel"] = tracing_wanted(prod["otel"], env)
    portal = _load_portal(doc["portal"], base) if "portal" in doc else None
    inbound = _load_inbound(doc["inbound"], base) if "inbound" in doc else None
    return ProductionOutline.from_validated(prod, portal=portal, inbound=inbound,
                                            entries=entries, path=path,
                                            system_defaults=defaults)


def _system_defaults(prod: dict[str, Any], env: Mapping[str, str]) -> SystemDefaults | None:
    """This production's rows of ``$ENCORE_DEFAULTS`` or ``[production] defaults``; None
    for neither."""
    from_env = env.get("ENCORE_DEFAULTS")
    if from_env:
        prod["defaults"] = os.path.abspath(from_env)
    if not prod["defaults"]:
        return None
    return load_defaults(Path(prod["defaults"])).for_production(prod["name"])


def absolute_sqlite_url(url: str, base: Path) -> str:
    """``url`` with an SQLite URL's relative file path made absolute from ``base``; any
    other URL as it is. Parsed without SQLAlchemy (``encore send`` never imports it)."""
    if not url.startswith("sqlite"):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    file = parts.path[1:] if parts.path.startswith("/") else parts.path
    if (parts.scheme not in ("sqlite", "sqlite+pysqlite") or parts.netloc
            or file in ("", ":memory:") or file.startswith("file:") or os.path.isabs(file)
            or "uri" in parse_qs(parts.query)):
        return url
    absolute = os.path.abspath(os.path.join(base, file))
    return f"{parts.scheme}:///{absolute}" + (f"?{parts.query}" if parts.query else "")


def _read_items(raw_items: Any, base: Path | None, production: str,
                defaults: SystemDefaults | None) -> tuple[ItemEntry, ...]:
    if not isinstance(raw_items, list):
        raise ConfigurationError("items must be an array of tables: [[items]]")
    entries: list[ItemEntry] = []
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
        entries.append(ItemEntry(name=keys["name"], class_path=keys["class"],
                                 pool_size=keys["pool_size"], enabled=keys["enabled"],
                                 raw_settings=keys["settings"] or {}, base=base,
                                 production=production, defaults=defaults))
    return tuple(entries)


def _load_portal(raw: Any, base: Path | None) -> PortalConfig:
    if not isinstance(raw, dict):
        raise ConfigurationError("portal must be a table: [portal]")
    keys = validate_settings("[portal]", raw, PORTAL_SETTINGS, base=base)
    if bool(keys["tls_cert"]) != bool(keys["tls_key"]):
        missing = "tls_key" if keys["tls_cert"] else "tls_cert"
        raise ConfigurationError("tls_cert and tls_key go together: set both for HTTPS, or "
                                 "neither", item="[portal]", key=missing)
    if keys["max_connections"] and keys["max_connections_per_client"] > keys["max_connections"]:
        raise ConfigurationError(f"{keys['max_connections_per_client']} is more than "
                                 f"max_connections ({keys['max_connections']})",
                                 item="[portal]", key="max_connections_per_client")
    return PortalConfig.from_validated(keys)


def _load_inbound(raw: Any, base: Path | None) -> InboundConfig:
    if not isinstance(raw, dict):
        raise ConfigurationError("inbound must be a table: [inbound]")
    keys = validate_settings("[inbound]", raw, INBOUND_SETTINGS, base=base)
    if bool(keys["tls_cert"]) != bool(keys["tls_key"]):
        missing = "tls_key" if keys["tls_cert"] else "tls_cert"
        raise ConfigurationError("tls_cert and tls_key go together: set both for HTTPS, or "
                                 "neither", item="[inbound]", key=missing)
    return InboundConfig.from_validated(keys)


def _check_inbound(items: tuple[ItemConfig, ...], inbound: InboundConfig | None) -> None:
    """An inbound service needs an ``[inbound]`` table."""
    if inbound is not None:
        return
    for item in items:
        if getattr(item.cls, "serves_inbound", False):
            raise ConfigurationError("an inbound service needs an [inbound] table saying "
                                     "where to listen, e.g. [inbound] port = 8081",
                                     item=item.name)


def _proxy_addresses(value: list[Any] | tuple[Any, ...]) -> list[str]:
    """``[portal] forwarded_allow_ips``: addresses, networks, or ``"*"``."""
    for entry in value:
        try:
            if entry != "*":
                ipaddress.ip_network(entry, strict=False)
        except (TypeError, ValueError):
            raise ValueError(f"{entry!r} is not an IP address, a network or '*'") from None
    return list(value)


def _check_targets(items: tuple[ItemConfig, ...]) -> None:
    """Every target an item names is another item that takes messages."""
    by_name = {i.name: i for i in items}
    for item in items:
        for ref in item.cls.declared_targets(item.settings):
            found = by_name.get(ref.target)
            if ref.target == item.name:
                problem = "is this item itself; an item cannot wait for its own queue"
            elif found is None:
                guess = difflib.get_close_matches(ref.target, list(by_name), n=1)
                hint = f"; did you mean {guess[0]!r}?" if guess else ""
                problem = (f"is not an item of the production (items: "
                           f"{', '.join(sorted(by_name))}){hint}")
            elif getattr(found.cls, "request_class", None) is None:
                problem = "is an item that does not take messages"
            else:
                continue
            raise ConfigurationError(f"{ref.where}: target {ref.target!r} {problem}",
                                     item=item.name, key=ref.key)
