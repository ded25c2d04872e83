"""Parameter types of the ``encore`` commands: a value no command can use (an id past what
the database holds, NaN seconds, a duration before year 1) is refused where it is parsed,
in one line naming the option — never a traceback from deep inside."""
from __future__ import annotations

import math
from typing import Any

import click

__all__ = ["BIGINT_MAX", "COUNT", "FiniteFloat", "ROW_ID", "SECONDS"]

BIGINT_MAX = 2**63 - 1  # the largest id a BIGINT column (and SQLite's INTEGER) holds
ROW_ID = click.IntRange(1, BIGINT_MAX)  # a message, session or event id
COUNT = click.IntRange(1, BIGINT_MAX)  # a number of rows (--limit)


class FiniteFloat(click.ParamType):
    """A finite number between ``minimum`` and ``maximum`` (None: unbounded on that side);
    NaN and infinities are refused, as in the production file (docs/settings.md, "Numbers")."""

    name = "number"

    def __init__(self, minimum: float | None = None, maximum: float | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number (NaN and infinities are refused)",
                      param, ctx)
        if ((self.minimum is not None and number < self.minimum)
                or (self.maximum is not None and number > self.maximum)):
            self.fail(f"{value!r} is out of range; expected {self._range()}", param, ctx)
        return number

    def _range(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"a number from {self.minimum:g} to {self.maximum:g}"
        if self.minimum is not None:
            return f"a number ≥ {self.minimum:g}"
        return f"a number ≤ {self.maximum:g}"


SECONDS = FiniteFloat(minimum=0)  # a wait in seconds: 0 looks once
