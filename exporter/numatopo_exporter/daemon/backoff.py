"""Capped exponential backoff for API retries (pure: the caller sleeps)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """Delays `initial`, `initial*factor`, ... up to `maximum`; `reset()` after a success."""

    initial_seconds: float = 1.0
    maximum_seconds: float = 60.0
    factor: float = 2.0
    _next: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._next = self.initial_seconds

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * self.factor, self.maximum_seconds)
        return delay

    def reset(self) -> None:
        self._next = self.initial_seconds
