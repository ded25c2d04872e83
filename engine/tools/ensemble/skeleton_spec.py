"""What a skeleton module holds, decided while mapping and written by :mod:`.skeleton`:
one per Ensemble class Encore has no equivalent of (a PEX host: one per remote class)."""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from typing import Any

from engine.tools.ensemble.model import EnsClass

KINDS = {"%String": str, "%Integer": int, "%Numeric": float, "%Decimal": float,
         "%Float": float, "%Boolean": bool, "%Library.String": str,
         "%Library.Integer": int, "%Library.Boolean": bool}


@dataclass
class OwnSetting:
    """A setting the skeleton declares: the Ensemble property (or PEX remote setting) it
    comes from, its Python type and default."""

    name: str  # snake_case
    ensemble: str
    kind: type
    default: Any
    help: str


@dataclass
class SkeletonSpec:
    """One skeleton class: where it goes, what it extends, what it declares."""

    module: str  # the module's name inside the package
    class_name: str
    kind: str  # operation, process or service
    adapter: str | None  # soap, http or None
    ensemble: str  # the Ensemble class (or PEX remote class) it stands for
    items: list[str] = field(default_factory=list)
    own: dict[str, OwnSetting] = field(default_factory=dict)
    source: EnsClass | None = None
    notes: list[str] = field(default_factory=list)


def snake(name: str) -> str:
    """``MaxAmount`` → ``max_amount``, ``SSLConfig`` → ``ssl_config``, ``%remote`` →
    ``remote``; a Python keyword gets a trailing underscore."""
    name = name.lstrip("%")
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    name = re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_").lower() or "setting"
    if name[0].isdigit():
        name = "s_" + name
    return name + "_" if keyword.iskeyword(name) else name


def class_identifier(name: str) -> str:
    """The last part of a dotted class name as a Python class name."""
    last = re.sub(r"[^0-9A-Za-z_]+", "", name.rsplit(".", 1)[-1].rsplit("$", 1)[-1]) or "Host"
    return ("H" + last) if last[0].isdigit() else last[0].upper() + last[1:]


def python_kind(ensemble_type: str) -> type:
    return KINDS.get(ensemble_type, str)


def value_of(text: str, kind: type) -> Any:
    """Ensemble text (a setting's value or an InitialExpression) as a ``kind`` value;
    ValueError when it is not one."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].replace('""', '"')
    if kind is bool:
        if text.lower() in ("1", "true"):
            return True
        if text.lower() in ("0", "false", ""):
            return False
        raise ValueError(f"{text!r} is not 1 or 0")
    if kind is int:
        return int(text)
    if kind is float:
        return float(text)
    return text


def guess_kind(text: str) -> type:
    """The type a value of a setting whose declaration is not in the source reads as."""
    try:
        int(text)
        return int
    except ValueError:
        pass
    try:
        float(text)
        return float
    except ValueError:
        return str
