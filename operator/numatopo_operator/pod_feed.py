"""Every pod, from a list and a watch of our own, handed to `handlers.pod_seen` (I/O; why
not kopf: docs/DESIGN.md, "Kubernetes client"). Per namespace given (all when none): (1) a
paginated LIST, each pod handed over as its slim view as its page is read; (2) a WATCH from
its resourceVersion; (3) on 410 Gone a LIST again, the pods it lacks handed over as
deleted. A pod seen again with the uid and resourceVersion last seen is skipped. Lists run
one at a time with `handover`'s (`Runtime.pod_lists`), so the resync journal sees no other
list's pods as newer than its own.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from numatopo_operator import handlers, list_watch, pod_view
from numatopo_operator.background import supervised
from numatopo_operator.errors import KubeError
from numatopo_operator.pod_view import slim_pod
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

# Pause before listing or watching again after the API refused.
RETRY_SECONDS = 1.0
Stamp = tuple[str, str]


def _stamp(pod: dict[str, Any]) -> Stamp:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("uid") or ""), str(metadata.get("resourceVersion") or "")


class _Feed:
    """The list and watch of one namespace ("*": all of them)."""

    def __init__(self, runtime: Runtime, namespace: str) -> None:
        self.runtime = runtime
        self.namespace = namespace
        self.known: dict[str, Stamp] = {}
        """pod key -> (uid, resourceVersion) as last handed over: what a relist compares."""
        self.workers = list_watch.KeyedWorkers()

    def hand_over(self, type: str | None, pod: dict[str, Any]) -> None:
        key = pod_view.pod_key(pod)
        stamp = _stamp(pod)
        if type == "DELETED":
            self.known.pop(key, None)
        elif type in (None, "ADDED") and stamp[1] and self.known.get(key) == stamp:
            return
        else:
            self.known[key] = stamp
            self.runtime.catch_up.observe(key, pod)
        follow_up = handlers.pod_seen(self.runtime, type, pod, logger)
        if follow_up is not None:
            self.workers.run(f"pod {key}", follow_up)

    async def relist(self) -> str | None:
        """Steps 1 and 3; the version to watch from. Nothing of the list is kept."""
        runtime = self.runtime
        namespaces = () if self.namespace == "*" else (self.namespace,)
        listed: set[str] = set()

        def hand_over_listed(raw: dict[str, Any]) -> None:
            pod = slim_pod(raw)
            listed.add(pod_view.pod_key(pod))
            self.hand_over(None, pod)

        async with runtime.pod_lists:
            listing = await runtime.kube.list_pods(namespaces=namespaces, keep=hand_over_listed)
            for key in [key for key in self.known if key not in listed]:
                namespace, _, name = key.partition("/")
                uid = self.known[key][0]
                gone = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
                self.hand_over("DELETED", gone)
        logger.info("listed %d pods in %s", len(listed), self.namespace)
        return listing.resource_version

    async def watch(self, version: str | None) -> None:
        """Step 2 until 410 Gone (returns: list again); other errors pause and resume."""
        while True:
            try:
                async for event in self.runtime.kube.watch_pods(
                    namespace=self.namespace, resource_version=version
                ):
                    pod = slim_pod(event.object)
                    version = _stamp(pod)[1] or version
                    self.hand_over(event.type, pod)
            except KubeError as exc:
                if exc.status == 410:
                    logger.info("pod watch in %s: 410 Gone, listing again", self.namespace)
                    return
                logger.warning("the pod watch in %s ended (resuming): %s", self.namespace, exc)
            await asyncio.sleep(RETRY_SECONDS)

    async def run(self, listed: asyncio.Event) -> None:
        while True:
            try:
                version = await self.relist()
                listed.set()
                await self.watch(version)
            except KubeError as exc:
                level = logging.DEBUG if exc.reason == "NotLoggedIn" else logging.WARNING
                logger.log(level, "cannot list pods in %s (retrying): %s", self.namespace, exc)
                await asyncio.sleep(RETRY_SECONDS)


async def follow_pods(runtime: Runtime) -> None:
    """Run the feeds until cancelled; `Runtime.pods_listed` is set once each has listed."""
    feeds = [_Feed(runtime, namespace) for namespace in runtime.settings.namespaces or ("*",)]
    listed = [asyncio.Event() for _ in feeds]
    # Anything else a feed raises ends it: its supervisor lists again after a backoff.
    tasks = [
        asyncio.create_task(
            supervised(runtime.metrics, f"pod feed in {feed.namespace}", partial(feed.run, done)),
            name=f"numatopo pods in {feed.namespace}",
        )
        for feed, done in zip(feeds, listed, strict=True)
    ]
    try:
        for done in listed:
            await done.wait()
        await runtime.indexed.wait()  # the Numatopologies too (`cluster_feed`)
        runtime.pods_listed.set()
        await asyncio.gather(*tasks)
    finally:
        await list_watch.stop_all(tasks)
        for feed in feeds:
            await feed.workers.stop()
