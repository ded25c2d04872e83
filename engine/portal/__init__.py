"""The management portal and JSON API (docs/portal.md); Starlette, Jinja2 and uvicorn are
imported only when the portal is used."""
from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from engine.portal.app import create_app

        return create_app
    raise AttributeError(name)
