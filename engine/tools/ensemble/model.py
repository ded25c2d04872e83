"""What an Ensemble source holds, as read from any of its forms: productions, their items
and settings, and the classes found beside them (a custom operation's adapter, settings
and methods; a routing rule). Values are kept as the source's text."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnsSetting:
    """``<Setting Target="Host|Adapter" Name="…">value</Setting>``."""

    target: str
    name: str
    value: str


@dataclass(frozen=True)
class EnsItem:
    """``<Item Name=… ClassName=… PoolSize=… Enabled=…>``: its attributes as written."""

    name: str
    class_name: str
    attributes: Mapping[str, str]
    settings: tuple[EnsSetting, ...]

    def setting(self, name: str) -> EnsSetting | None:
        """The last setting named ``name`` (Host or Adapter), None if absent."""
        found = [s for s in self.settings if s.name == name]
        return found[-1] if found else None


@dataclass(frozen=True)
class EnsProduction:
    """One ``<Production>``: ``class_name`` is the class that holds it (the production's
    own name for a bare document)."""

    class_name: str
    name: str
    attributes: Mapping[str, str]
    description: str
    actor_pool_size: str | None
    settings: tuple[EnsSetting, ...]
    items: tuple[EnsItem, ...]


@dataclass(frozen=True)
class EnsProperty:
    name: str
    type: str
    initial: str | None  # the InitialExpression, as ObjectScript writes it


@dataclass(frozen=True)
class EnsMethod:
    name: str
    spec: str  # the formal arguments, as written
    returns: str
    body: str


@dataclass(frozen=True)
class EnsClass:
    """A class definition found in the source (UDL or XML): enough to write its skeleton."""

    name: str
    supers: tuple[str, ...]
    parameters: Mapping[str, str] = field(default_factory=dict)
    properties: tuple[EnsProperty, ...] = ()
    methods: tuple[EnsMethod, ...] = ()
    xdata: Mapping[str, str] = field(default_factory=dict)

    @property
    def adapter(self) -> str | None:
        """The class's ``ADAPTER`` parameter, None if it names none."""
        return self.parameters.get("ADAPTER") or None

    def settings_names(self) -> tuple[str, ...]:
        """The properties its ``SETTINGS`` parameter makes settings (``Name:Category,…``)."""
        text = self.parameters.get("SETTINGS", "")
        names = (part.split(":", 1)[0].strip() for part in text.split(","))
        return tuple(n.lstrip("-") for n in names if n and not n.startswith("-"))


@dataclass(frozen=True)
class EnsembleSource:
    """Every production and class found in a source (a file, or a directory of them)."""

    productions: tuple[EnsProduction, ...]
    classes: Mapping[str, EnsClass]
