"""Operations used only by the benchmarks."""
from __future__ import annotations

from typing import Any

from engine import BusinessOperation


class NoopOperation(BusinessOperation):
    """Does nothing and answers nothing: what is left is the engine's own cost per message."""

    def on_message(self, request: Any) -> None:
        return None
