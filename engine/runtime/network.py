"""Kept for the importers of ``is_loopback`` here: it lives in :mod:`engine.observe.network`,
below the metrics endpoint that needs it."""
from __future__ import annotations

from engine.observe.network import is_loopback

__all__ = ["is_loopback"]
