"""The retry queue: pods to judge again, each at its own time, with bounded backoff (pure).

Events re-drive most pods, not all (a write refused past the client's quick retries, a
node whose exporter went quiet): such a pod is kept with its last body and judged again
after `base * 2**attempts` seconds (at most `cap`) until `discard`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from numatopo_kube.backoff import Backoff

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    backoff: Backoff
    pod: T


@dataclass
class RetryQueue(Generic[T]):
    base: float
    cap: float
    _entries: dict[str, _Entry[T]] = field(default_factory=dict)
    # (due, key) per scheduling; entries whose due changed since are skipped when popped.
    _heap: list[tuple[float, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def schedule(self, key: str, pod: T, now: float) -> float:
        """Judge `key` again later; returns the pause, doubling with each attempt."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(Backoff(self.base, self.cap), pod)
        entry.pod = pod
        pause = entry.backoff.schedule(now)
        heapq.heappush(self._heap, (entry.backoff.due, key))
        return pause

    def refresh(self, key: str, pod: T) -> None:
        """A newer body of a queued pod: the retry uses it, at the time already chosen."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.pod = pod

    def discard(self, key: str) -> None:
        """The pod has its answer, or is gone: no more retries (and the backoff resets)."""
        if self._entries.pop(key, None) is not None:
            # Its heap places go now, not when due (nothing keeps a gone pod's key; the
            # queue is short: pods that wait).
            self._heap = [found for found in self._heap if found[1] != key]
            heapq.heapify(self._heap)

    def next_due(self) -> float | None:
        """When the earliest entry is due; None when the queue is empty."""
        while self._heap:
            due, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry.backoff.due == due:
                return due
            heapq.heappop(self._heap)
        return None

    def pop_due(self, now: float) -> list[tuple[str, T]]:
        """The pods due at `now`, earliest first, queued (attempts kept) until `schedule`,
        `discard` or `put_back`: without one of those it is never due again."""
        found: list[tuple[str, T]] = []
        while (due := self.next_due()) is not None and due <= now:
            _, key = heapq.heappop(self._heap)
            found.append((key, self._entries[key].pod))
        return found

    def put_back(self, keys: Iterable[str]) -> None:
        """Popped pods that were not judged: due again at once, their attempts unchanged."""
        for key in keys:
            entry = self._entries.get(key)
            if entry is not None:
                heapq.heappush(self._heap, (entry.backoff.due, key))
