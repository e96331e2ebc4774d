"""One GPU pod in flight per steered node (pure state, asyncio waits; why: docs/DESIGN.md,
"GPUs: steered, followed or unverified"). A second GPU pod on a `Steered` node waits (in the
bind, or the retry queue) until the first is seen admitted or gone, or a timeout passes (a
kubelet that never admits it must not stop the node); steering may then guess wrong, and
Follow heals.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class GpuAdmissions:
    timeout_seconds: float = 8.0
    """How long one pod holds its node's slot at most."""
    clock: Callable[[], float] = time.monotonic
    _held: dict[str, tuple[str, float]] = field(default_factory=dict, init=False)
    _freed: dict[str, asyncio.Event] = field(default_factory=dict, init=False)

    def holder(self, node: str) -> str | None:
        """The pod in flight on `node` (None: none, or its time is up)."""
        held = self._held.get(node)
        if held is None or held[1] <= self.clock():
            return None
        return held[0]

    def take(self, node: str, key: str) -> bool:
        """Take `node`'s slot for pod `key` unless another pod holds it now."""
        holder = self.holder(node)
        if holder is not None and holder != key:
            return False
        self._held[node] = (key, self.clock() + self.timeout_seconds)
        return True

    async def wait_and_take(self, node: str, key: str) -> bool:
        """Take the slot once free; False when the holder's time ran out (taken all the same)."""
        while not self.take(node, key):
            held = self._held[node]
            event = self._freed.setdefault(node, asyncio.Event())
            try:
                async with asyncio.timeout(max(held[1] - self.clock(), 0.0)):
                    await event.wait()
            except TimeoutError:
                self._held.pop(node, None)
                self.take(node, key)
                return False
        return True

    def admitted(self, key: str) -> None:
        """Pod `key` was seen admitted (or ended, or lost its assignment): free its slot."""
        for node, (holder, _) in list(self._held.items()):
            if holder == key:
                del self._held[node]
                event = self._freed.pop(node, None)
                if event is not None:
                    event.set()
