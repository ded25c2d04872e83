"""Modules imported on first use: what lets a command that does not need them (``encore
send`` without SQLAlchemy) start fast, while the code that uses them reads as usual."""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """Module ``name``, executed only when one of its attributes is first read (the
    standard library's ``importlib.util.LazyLoader`` recipe). Already imported: as it is."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
