"""One kind of object followed by a list, then a watch from that list's resourceVersion
(I/O); `cluster_feed` follows Numatopologies and Nodes with it, `dra_feed` the DRA kinds.

410 Gone (the version was compacted away) lists again, and the new list replaces what
was known: what it lacks ended while nobody watched. Any other API error backs off
(`Backoff`), then watches from the last version seen, or lists again; anything else
ends `follow`, and its supervisor (`background`) runs it again. `KeyedWorkers`
runs what an event leaves to do that waits on the API, one task per object, so such a
wait never holds up the watch whose next events it may need (`pod_feed`'s pods too).
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
    """One watch event: its type (ADDED, MODIFIED, DELETED) and object; what it returns
    is awaited before the next event is read."""
    absent_retry_seconds: float | None = None
    """Where the API does not serve the kind (a list answered 404: DRA on a cluster
    without it), how long until it is asked again; None: a failure like any other."""


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
    """One list handed over; returns the version to watch from. The list's bodies are
    dropped on return: kept while the watch runs (that is, for good) they were 45 MiB
    of decoded Numatopologies per 1,000 nodes."""
    answer = await kind.listing()
    await kind.listed(answer.items)
    logger.info("listed %d %s", len(answer.items), kind.name)
    return answer.resource_version


async def follow(kind: Followed) -> None:
    """List and watch `kind` until cancelled. Any error but the API's ends it: run
    under a supervisor (`background`), it lists again from a known state."""
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
    """`take` each item, letting the loop turn every `TURN_EVERY`: parsing 2,000
    Numatopologies in one go held the loop for seconds, past the Lease's renew deadline."""
    for done, item in enumerate(items, 1):
        take(item)
        if done % TURN_EVERY == 0:
            await asyncio.sleep(0)


FollowUp = Callable[[], Awaitable[None]]


@dataclass
class KeyedWorkers:
    """One worker per key: a key's follow-ups run in the order given, a newer one
    replacing any not started yet; other keys' run meanwhile."""

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
    """Cancel each task that no one cancelled yet, and wait for them all to end. Never
    twice: when kopf stops it cancels every task begun since it started, and a second
    cancel cut an HTTP request's cleanup short, leaving its pool connections open."""
    tasks = list(tasks)
    for task in tasks:
        if not task.cancelling():
            task.cancel()
    if not tasks:
        return
    _, going_on = await asyncio.wait(tasks, timeout=STOP_GRACE_SECONDS)
    for task in going_on:
        # One that took the first cancel and went on (a library may absorb it) would
        # hold the operator's exit for good: past the grace, it is cancelled again.
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
