"""The management portal and JSON API (docs/portal.md): :func:`create_app` builds the ASGI
application; :mod:`engine.portal.server` serves it; :mod:`engine.portal.cli` holds
``encore portal``, ``encore user`` and ``encore token``.

Starlette, Jinja2 and uvicorn are imported only when the portal is used, not by every
``encore`` command."""
from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from engine.portal.app import create_app

        return create_app
    raise AttributeError(name)
