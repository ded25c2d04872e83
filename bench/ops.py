"""Operations used only by the benchmarks (the process is in bench/process_ops.py, so that
`encore send` to these items imports no more than a user's operation would)."""
from __future__ import annotations

from typing import Any

from engine import BusinessOperation


class NoopOperation(BusinessOperation):
    """Does nothing and answers nothing: what is left is the engine's own cost per message."""

    def on_message(self, request: Any) -> None:
        return None


class EchoOperation(BusinessOperation):
    """Answers ``{"ok": true}`` at once: the no-op target of the latency scenarios."""

    def on_message(self, request: Any) -> dict[str, Any]:
        return {"ok": True}

