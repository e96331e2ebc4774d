"""The Events of decisions, posted off the decision's path (I/O).

A decision is done once its pod's annotations are written; its Event only tells a
person what happened, so a slow or refusing Events API must never hold a pod's worker
or the extender's bind answer. The bounded queue and what is dropped, counted and
logged: docs/operations.md, "Status freshness".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from numatopo_kube import KubeClient
from numatopo_operator.background import supervised
from numatopo_operator.metrics import Metrics

__all__ = ["EventPosts"]

logger = logging.getLogger(__name__)

# Events waiting at most: a minute of a 180-pods/s burst with the Events API gone slow
# is still queued, and a few hundred bytes each bound the memory.
QUEUE_SIZE = 10_000
# Posts in flight at once: one at a time is a few hundred Events a second over a
# millisecond's round trip, below a burst's rate on a farther API server.
POSTERS = 4


@dataclass(frozen=True)
class _Event:
    about: Mapping[str, str]
    warning: bool
    reason: str
    message: str


class EventPosts:
    """The Events waiting to be posted (`post`), and their posters (`run`)."""

    def __init__(self, metrics: Metrics, *, size: int = QUEUE_SIZE) -> None:
        self._metrics = metrics
        self._queue: asyncio.Queue[_Event] = asyncio.Queue(size)
        self._dropped = 0
        self._posting = 0

    def post(self, about: Mapping[str, str], *, warning: bool, reason: str, message: str) -> None:
        """Queue an Event about `about` (as `KubeClient.post_event` takes it); never waits."""
        try:
            self._queue.put_nowait(_Event(about, warning, reason, message))
        except asyncio.QueueFull:
            self._drop(1, f"{self._queue.maxsize} are waiting already")

    @property
    def pending(self) -> int:
        """Events queued or being posted."""
        return self._queue.qsize() + self._posting

    async def run(self, kube: KubeClient) -> None:
        """Forever: post the queued Events, `POSTERS` at a time. On stop, what is still
        queued is counted as dropped."""
        try:
            # Each under its own supervisor (`background`): an unexpected error of one
            # post ends no poster for good (nor, through `gather`, this method).
            posters = (
                supervised(self._metrics, "events poster", lambda: self._poster(kube))
                for _ in range(POSTERS)
            )
            await asyncio.gather(*posters)
        finally:
            if left := self._queue.qsize():
                self._drop(left, "the operator stopped before posting them")

    async def _poster(self, kube: KubeClient) -> None:
        while True:
            event = await self._queue.get()
            self._posting += 1
            try:
                # Best effort: post_event logs a refusal and returns False.
                await kube.post_event(
                    event.about, warning=event.warning, reason=event.reason, message=event.message
                )
            except asyncio.CancelledError:
                self._drop(1, "the operator stopped while posting them")
                raise
            finally:
                self._posting -= 1

    def _drop(self, count: int, why: str) -> None:
        before, self._dropped = self._dropped, self._dropped + count
        self._metrics.events_dropped.inc(count)
        # A line at 1, 10, 100... dropped, not one per Event: a flood would drown the log.
        if len(str(before)) != len(str(self._dropped)) or not before:
            logger.warning(
                "%d Events dropped so far (%s): numatopo_events_dropped_total", self._dropped, why
            )
