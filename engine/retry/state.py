"""The state of a delivery after attempt *k* that the retry policy and backoffs decide from."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["AttemptState"]


@dataclass(frozen=True, kw_only=True)
class AttemptState:
    """What happened in attempt *k* (monotonic seconds): ``first_started`` s_1, ``started`` s_k,
    ``ended`` f_k; ``error`` what it raised, if anything."""

    attempt: int
    first_started: float
    started: float
    ended: float
    error: BaseException | None = None

    def __post_init__(self) -> None:
        if self.attempt < 1:
            raise ValueError(f"attempt numbers start at 1, got {self.attempt}")
        if self.ended < self.started:
            raise ValueError(f"attempt ended ({self.ended}) before it started ({self.started})")

    @property
    def elapsed(self) -> float:
        """Seconds from the start of the first attempt to the end of this one (f_k − s_1)."""
        return self.ended - self.first_started

    @property
    def status_code(self) -> int | None:
        """The error's HTTP status; None when it has none."""
        return getattr(self.error, "status_code", None)

    @property
    def headers(self) -> Mapping[str, str]:
        """The error's response headers; empty when it has none."""
        headers = getattr(self.error, "headers", None)
        return headers if isinstance(headers, Mapping) else {}
