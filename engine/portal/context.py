"""What every route of the portal shares: the :class:`Portal` and :func:`portal_of`. A module
of its own so that routing never imports :mod:`engine.portal.app`."""
from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from engine.clock import utcnow
from engine.config.production import PortalConfig, ProductionConfig
from engine.portal.auth import PortalAuthenticator
from engine.serving.auth import Principal
from engine.store.sql import SqlStore

__all__ = ["Portal", "Waiters", "portal_of"]


class Waiters:
    """The intake calls waiting for their message (``?wait``) on this portal: at most
    ``limit`` at once; past it a call is refused (503) before anything is created."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self._lock = threading.Lock()

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._lock:
            if self.count >= self.limit:
                raise HTTPException(503, f"{self.limit} calls are waiting (?wait) on this "
                                         "portal already, the most it lets wait at once; try "
                                         "again later, or send without ?wait and read the "
                                         "message afterwards", headers={"retry-after": "1"})
            self.count += 1
        try:
            yield
        finally:
            with self._lock:
                self.count -= 1


@dataclass
class Portal:
    """What every route needs."""

    store: SqlStore
    production: ProductionConfig
    auth: PortalAuthenticator
    templates: Jinja2Templates
    tls: bool = False
    waiters: Waiters = field(
        default_factory=lambda: Waiters(PortalConfig.defaults().max_waiters))

    _names: tuple[ProductionConfig | None, frozenset[str]] = field(
        default=(None, frozenset()), init=False, repr=False)

    @property
    def items(self) -> list[str]:
        return [item.name for item in self.production.items]

    def has_item(self, name: str) -> bool:
        """True if the production has an item ``name`` (a set per production: the intake
        asks on every call)."""
        production, names = self._names
        if production is not self.production:
            production = self.production
            names = frozenset(item.name for item in production.items)
            self._names = (production, names)
        return name in names

    def render(self, request: Request, template: str, context: Mapping[str, Any], *,
               user: Principal | None, status_code: int = 200) -> Response:
        """A page: ``template`` with ``context``, the user, and what their role allows."""
        page = {"user": user, "can_act": bool(user and user.may("operator")),
                "csrf": user.csrf if user else "", "production": self.production.name,
                "now": utcnow(), **context}
        return self.templates.TemplateResponse(request, template, page, status_code=status_code)


def portal_of(request: Request) -> Portal:
    portal: Portal = request.app.state.portal
    return portal
