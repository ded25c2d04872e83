"""What the daemon and its coordinators share."""
from __future__ import annotations

import logging
from collections.abc import Callable

from engine.config.production import ItemConfig, ProductionConfig
from engine.errors import EncoreError
from engine.host import BusinessOperation

log = logging.getLogger("engine.runtime.daemon")

TICK_RETRY_DELAY = 1.0  # seconds before a tick step that failed (the database) is tried again


def operation_items(production: ProductionConfig) -> list[ItemConfig]:
    """The items of ``production`` that run on worker threads (business operations)."""
    return [i for i in production.items if issubclass(i.cls, BusinessOperation)]


def guarded(step: Callable[[], float | None], what: str) -> float | None:
    """Run ``step()``; if it fails, log it and return TICK_RETRY_DELAY."""
    try:
        return step()
    except EncoreError as exc:
        log.error("%s: %s; trying again in %.0f s", what, exc, TICK_RETRY_DELAY)
    except Exception:
        log.exception("%s: unexpected error; trying again in %.0f s", what, TICK_RETRY_DELAY)
    return TICK_RETRY_DELAY
