"""Capped exponential backoff for API retries, shared by the node side and the operator
(pure: the caller sleeps, or polls `due`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays `initial`, `initial*factor`, ... up to `maximum`; `reset()` after a success."""

    initial_seconds: float = 1.0
    maximum_seconds: float = 60.0
    factor: float = 2.0
    attempts: int = field(default=0, init=False)
    """Delays handed out since the last reset (1 after the first failure)."""
    due: float = field(default=0.0, init=False)
    """When the next try is due, for callers that poll instead of sleeping (`schedule`)."""
    _next: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._next = self.initial_seconds

    def next_delay(self) -> float:
        delay = min(self._next, self.maximum_seconds)
        # Grown step by step, not as factor**attempts: that overflows a float after a
        # thousand failures, and a node can be unreachable for that long.
        self._next = min(self._next * self.factor, self.maximum_seconds)
        self.attempts += 1
        return delay

    def schedule(self, now: float) -> float:
        """The next delay, counted from `now` into `due`."""
        delay = self.next_delay()
        self.due = now + delay
        return delay

    def reset(self) -> None:
        self._next = self.initial_seconds
        self.attempts = 0
        self.due = 0.0
