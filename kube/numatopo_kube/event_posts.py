"""Events posted off the caller's path: a bounded queue and its posters (I/O). An Event only
tells a person what happened (the outcome is in the objects written), so `post` queues and
returns at once and `run` posts; what is dropped, counted and logged: docs/operations.md,
"Status freshness" and "Node agent: when it refuses, and what it reports".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from numatopo_kube.client import KubeClient
from numatopo_kube.supervise import keep_running

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Event:
    about: Mapping[str, str]
    warning: bool
    reason: str
    message: str


class EventPosts:
    """The Events waiting to be posted (`post`), and their posters (`run`). `count_dropped`
    gets each number dropped (a metric's `inc`), `metric` names it in the log, `process` who
    stopped. Posters run under `supervise.keep_running` (an error is logged, counted by
    `crashed`, ends none for good); one posts in queue order, more may reorder Events."""

    def __init__(
        self,
        count_dropped: Callable[[int], object],
        *,
        size: int,
        posters: int,
        metric: str,
        process: str,
        crashed: Callable[[], None],
    ) -> None:
        self._count_dropped = count_dropped
        self._crashed = crashed
        self._queue: asyncio.Queue[_Event] = asyncio.Queue(size)
        self._posters = posters
        self._metric = metric
        self._process = process
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
        """Forever: post queued Events, `posters` at a time; on stop, drop (and count) the rest."""
        try:
            posters = (
                keep_running("events poster", lambda: self._poster(kube), crashed=self._crashed)
                for _ in range(self._posters)
            )
            await asyncio.gather(*posters)
        finally:
            left = 0
            while not self._queue.empty():
                self._queue.get_nowait()
                left += 1
            if left:
                self._drop(left, f"{self._process} stopped before posting them")

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
                self._drop(1, f"{self._process} stopped while posting them")
                raise
            finally:
                self._posting -= 1

    def _drop(self, count: int, why: str) -> None:
        before, self._dropped = self._dropped, self._dropped + count
        self._count_dropped(count)
        # A line at 1, 10, 100... dropped, not one per Event: a flood would drown the log.
        if len(str(before)) != len(str(self._dropped)) or not before:
            logger.warning("%d Events dropped so far (%s): %s", self._dropped, why, self._metric)
