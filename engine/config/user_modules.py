"""Where the modules a production names are imported from.

The production file's directory is *appended* to ``sys.path``, after Encore's own packages
are imported and checked, so a user's directory can never take the place of one of them:
their names (:data:`ENCORE_PACKAGES`) are taken.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import ConfigurationError

if TYPE_CHECKING:
    from engine.host import BusinessHost

ENCORE_PACKAGES = ("engine", "adapters", "operations", "migrations")


def add_production_directory(production_file: Path) -> None:
    """Make the modules beside ``production_file`` importable: its directory goes at the
    end of ``sys.path``, after Encore's own packages are imported and checked."""
    check_own_packages()
    directory = str(production_file.resolve().parent)
    if directory not in sys.path:
        sys.path.append(directory)


def check_own_packages() -> None:
    """Import Encore's packages; raise :class:`ConfigurationError` when one of them comes
    from somewhere else than Encore (a package of the user's with the same name, found
    first on ``sys.path`` — e.g. in the current directory under ``python -m``)."""
    home = _package_home("engine")
    for name in ENCORE_PACKAGES[1:]:
        where = _package_home(name)
        if where != home:
            raise ConfigurationError(
                f"the package {name!r} was imported from {where}, not from Encore ({home}): "
                f"a package or module of yours named {name!r} hides Encore's; rename yours "
                f"({taken_names()} are Encore's own)")


def resolve_class(path: str, *, item: str) -> type[BusinessHost]:
    """Resolve ``module:Class`` to a BusinessHost subclass, naming the key on failure."""
    from engine.host import BusinessHost  # with the first class: it brings the retry engine

    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{path!r} is not of the form 'module:Class'", item=item,
                                 key="class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = _module_guess(module_name, attr) or shadowing_hint(module_name)
        raise ConfigurationError(f"module {module_name!r} cannot be imported: {exc}{hint}",
                                 item=item, key="class") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        hint = _class_guess(module, attr, BusinessHost) or shadowing_hint(module_name)
        raise ConfigurationError(f"module {module_name!r} has no {attr!r}{hint}", item=item,
                                 key="class")
    if not (isinstance(cls, type) and issubclass(cls, BusinessHost)):
        raise ConfigurationError(
            f"{path!r} is not a BusinessOperation, BusinessProcess or BusinessService class",
            item=item, key="class")
    return cls


def _class_guess(module: object, attr: str, base: type) -> str:
    """``; did you mean 'module:Class'?`` for the host class of Encore's ``module`` closest
    to ``attr`` (a typo in the name of one of Encore's own classes); else ''."""
    name = getattr(module, "__name__", "")
    if name.partition(".")[0] not in ENCORE_PACKAGES:
        return ""
    hosts = [n for n, v in vars(module).items()
             if not n.startswith("_") and isinstance(v, type) and issubclass(v, base)]
    guess = difflib.get_close_matches(attr, hosts, n=1, cutoff=0.6)
    return f"; did you mean '{name}:{guess[0]}'?" if guess else ""


def _module_guess(module_name: str, attr: str) -> str:
    """``; did you mean 'package.module:Class'?`` for the module of Encore's own closest to
    ``module_name`` when the name is in one of Encore's packages; else ''."""
    parent, _, leaf = module_name.rpartition(".")
    if module_name.partition(".")[0] not in ENCORE_PACKAGES or not parent:
        return ""
    try:
        package = importlib.import_module(parent)
    except ImportError:
        return ""
    names = [m.name for m in pkgutil.iter_modules(getattr(package, "__path__", []))]
    guess = difflib.get_close_matches(leaf, names, n=1, cutoff=0.6)
    return f"; did you mean '{parent}.{guess[0]}:{attr}'?" if guess else ""


def shadowing_hint(module_name: str) -> str:
    """For a module of ``module_name`` that failed to import or lacked a class: why, when
    its first part is one of Encore's packages; else ''."""
    top = module_name.partition(".")[0]
    if top not in ENCORE_PACKAGES:
        return ""
    return (f". {top!r} is Encore's own package, so a package of yours by that name is never "
            f"imported: rename yours ({taken_names()} are taken)")


def taken_names() -> str:
    """``'engine', 'adapters', 'operations' and 'migrations'``."""
    quoted = [repr(n) for n in ENCORE_PACKAGES]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _package_home(name: str) -> Path:
    """The directory that holds package ``name`` (its parent's parent of ``__init__``)."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise ConfigurationError(
            f"Encore's package {name!r} cannot be imported ({exc}): a package or module of "
            f"yours named {name!r} may hide it; rename yours ({taken_names()} are Encore's "
            "own)") from exc
    location = getattr(module, "__file__", None) or next(iter(module.__path__), "")
    path = Path(location).resolve()
    return path.parent.parent if path.name == "__init__.py" else path.parent
