"""One kind of object followed by a list, then a watch from its resourceVersion (I/O), for
`cluster_feed` and `dra_feed` (docs/DESIGN.md, "Kubernetes client"): 410 Gone lists again,
the new list replacing what was known; another API error backs off, then watches from the
last version seen; anything else ends `follow` for its supervisor to run again.
`KeyedWorkers` runs an event's API-bound follow-up, one task per object, so it never holds
up the watch whose next events it may need (`pod_feed`'s too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from numatopo_kube import Listing, WatchEvent
from numatopo_kube.backoff import Backoff
from numatopo_operator.errors import KubeError

logger = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0
Body = dict[str, Any]


@dataclass(frozen=True)
class Followed:
    """One kind followed: its list and watch, and where what they say goes."""

    name: str
    listing: Callable[[], Awaitable[Listing]]
    watching: Callable[[str | None], AsyncIterator[WatchEvent]]
    listed: Callable[[list[Body]], Awaitable[None]]
    """Every object of a list: it replaces what was known (`in_turns` between objects)."""
    seen: Callable[[str, Body], Awaitable[None] | None]
    """One watch event's type and object; what it returns is awaited before the next."""
    absent_retry_seconds: float | None = None
    """After a list answered 404 (the kind not served: DRA on a cluster without it), the
    pause before asking again; None: a failure like any other."""


async def _watch(kind: Followed, version: str | None, backoff: Backoff) -> None:
    """Watch from `version` until 410 Gone (returns: list again)."""
    while True:
        try:
            async for event in kind.watching(version):
                metadata = event.object.get("metadata") or {}
                version = str(metadata.get("resourceVersion") or "") or version
                if event.type in ("ADDED", "MODIFIED", "DELETED"):
                    left = kind.seen(event.type, event.object)
                    if left is not None:
                        await left
                backoff.reset()
        except KubeError as exc:
            if exc.status == 410:
                logger.info("%s watch: 410 Gone, listing again", kind.name)
                return
            logger.warning("the %s watch ended (resuming): %s", kind.name, exc)
        await asyncio.sleep(backoff.next_delay())


async def _list(kind: Followed) -> str | None:
    """One list handed over; the version to watch from. Its bodies are dropped on return
    (kept for the watch, they were 45 MiB of Numatopologies per 1,000 nodes)."""
    answer = await kind.listing()
    await kind.listed(answer.items)
    logger.info("listed %d %s", len(answer.items), kind.name)
    return answer.resource_version


async def follow(kind: Followed) -> None:
    """List and watch `kind` until cancelled; a non-API error ends it for its supervisor."""
    backoff = Backoff(RETRY_SECONDS, RETRY_MAX_SECONDS)
    while True:
        try:
            version = await _list(kind)
            backoff.reset()
            await _watch(kind, version, backoff)
            continue
        except KubeError as exc:
            if exc.status == 404 and kind.absent_retry_seconds is not None:
                logger.info("%s are not served: nothing followed", kind.name)
                await asyncio.sleep(kind.absent_retry_seconds)
                continue
            level = logging.DEBUG if exc.reason == "NotLoggedIn" else logging.WARNING
            logger.log(level, "cannot list %s (retrying): %s", kind.name, exc)
        await asyncio.sleep(backoff.next_delay())


# Objects handed over between two turns of the loop while a list is taken in.
TURN_EVERY = 50


async def in_turns(items: list[Body], take: Callable[[Body], None]) -> None:
    """`take` each item, letting the loop turn every `TURN_EVERY` (2,000 Numatopologies in
    one go held it past the Lease's renew deadline)."""
    for done, item in enumerate(items, 1):
        take(item)
        if done % TURN_EVERY == 0:
            await asyncio.sleep(0)


FollowUp = Callable[[], Awaitable[None]]


@dataclass
class KeyedWorkers:
    """One worker per key: its follow-ups in order, a newer one replacing one not started yet."""

    pending: dict[str, FollowUp] = field(default_factory=dict)
    workers: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def run(self, key: str, follow_up: FollowUp) -> None:
        self.pending[key] = follow_up
        if key not in self.workers:
            self.workers[key] = asyncio.create_task(self._work(key), name=f"numatopo {key}")

    async def _work(self, key: str) -> None:
        try:
            while (follow_up := self.pending.pop(key, None)) is not None:
                await follow_up()
        finally:
            self.workers.pop(key, None)

    async def stop(self) -> None:
        await stop_all(list(self.workers.values()))


# How long a cancelled task may take to clean up before it is cancelled again.
STOP_GRACE_SECONDS = 2.0


async def stop_all(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel each task not cancelled yet, and wait for all to end. Never twice within the
    grace (kopf cancels every task on stop): a second cancel cut an HTTP request's cleanup
    short, leaving its pool connections open."""
    tasks = list(tasks)
    for task in tasks:
        if not task.cancelling():
            task.cancel()
    if not tasks:
        return
    _, going_on = await asyncio.wait(tasks, timeout=STOP_GRACE_SECONDS)
    for task in going_on:
        # One that absorbed the first cancel would hold the exit for good.
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
