"""Every ResourceClaim, ResourceSlice and DeviceClass, listed then watched, into
`Runtime.dra_holds` and from there into the ledger (I/O; the bookkeeping is
`dra_holds`); the extender judges DRA pods by the same copies (`dra_extender`).

Each kind: a LIST, then a WATCH from its resourceVersion; a watch that ends with 410
Gone lists again (the list replaces what was known, so what ended unwatched is
dropped), any other error pauses and resumes from the last version seen. Where the API
does not serve `resource.k8s.io/v1` (404: a cluster without DRA) it asks again rarely
and holds nothing. Every node whose holds change is booked again at once; pods waiting
on a node a claim freed are judged again (`handlers` redrives them as for a pod's end).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from numatopo_kube import Listing, WatchEvent
from numatopo_operator import assigning
from numatopo_operator.errors import KubeError, kept_serving
from numatopo_operator.runtime import Runtime

__all__ = ["follow_dra"]

logger = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
ABSENT_RETRY_SECONDS = 300.0
"""How often a cluster that does not serve resource.k8s.io/v1 is asked again."""

Seen = Callable[[bool, Mapping[str, Any]], set[str]]
Listed = Callable[[Iterable[Mapping[str, Any]]], set[str]]


async def _booked(runtime: Runtime, nodes: set[str]) -> None:
    """Book the holds of `nodes` again; judge again the pods and groups waiting where a
    claim freed devices (a hold that grew frees nothing)."""
    freed = []
    for node in sorted(nodes):
        runtime.ledger.mark_dirty(node)  # `status.dra` may change with the slices
        before = dict(runtime.ledger.dra_holds(node))
        if runtime.dra_holds.sync(runtime.ledger, node) and any(
            key not in runtime.ledger.dra_holds(node) or runtime.ledger.dra_holds(node)[key] != hold
            for key, hold in before.items()
        ):
            freed.append(node)
    if not runtime.deciding:
        return
    if freed:
        runtime.groups.capacity_changed()  # groups waiting for room try again
    for node in freed:
        for pod in runtime.waiting.on(node):
            with kept_serving(logger, f"pod waiting on {node}", runtime.metrics):
                await assigning.settle(runtime, pod)


@dataclass(frozen=True)
class _Kind:
    """One kind followed: its list and watch, and where what they say goes."""

    name: str
    listing: Callable[[], Awaitable[Listing]]
    watching: Callable[[str | None], AsyncIterator[WatchEvent]]
    listed: Listed
    seen: Seen


async def _follow(runtime: Runtime, kind: _Kind) -> None:
    while True:
        try:
            answer = await kind.listing()
            await _booked(runtime, kind.listed(answer.items))
            version = answer.resource_version
            while True:
                try:
                    async for event in kind.watching(version):
                        metadata = event.object.get("metadata") or {}
                        version = str(metadata.get("resourceVersion") or version or "") or None
                        if event.type in ("ADDED", "MODIFIED", "DELETED"):
                            deleted = event.type == "DELETED"
                            await _booked(runtime, kind.seen(deleted, event.object))
                except KubeError as exc:
                    if exc.status == 410:
                        logger.info("%s watch: 410 Gone, listing again", kind.name)
                        break
                    logger.warning("the %s watch ended (resuming): %s", kind.name, exc)
                await asyncio.sleep(RETRY_SECONDS)
        except KubeError as exc:
            if exc.status == 404:
                logger.info("%s are not served (no DRA on this cluster): nothing held", kind.name)
                await asyncio.sleep(ABSENT_RETRY_SECONDS)
                continue
            level = logging.DEBUG if exc.reason == "NotLoggedIn" else logging.WARNING
            logger.log(level, "cannot list %s (retrying): %s", kind.name, exc)
            await asyncio.sleep(RETRY_SECONDS)
        except Exception:
            # Never a silent end: the holds would go stale while the process runs on.
            logger.exception("following %s failed (listing again)", kind.name)
            await asyncio.sleep(RETRY_SECONDS)


async def follow_dra(runtime: Runtime) -> None:
    """Follow claims and slices until cancelled."""
    kube, holds = runtime.kube, runtime.dra_holds

    def claims_watch(version: str | None) -> AsyncIterator[WatchEvent]:
        return kube.watch_resource_claims(resource_version=version)

    def slices_watch(version: str | None) -> AsyncIterator[WatchEvent]:
        return kube.watch_resource_slices(resource_version=version)

    def classes_watch(version: str | None) -> AsyncIterator[WatchEvent]:
        return kube.watch_device_classes(resource_version=version)

    slices = _Kind(
        "ResourceSlices",
        kube.list_resource_slices,
        slices_watch,
        holds.slices_listed,
        holds.slice_seen,
    )
    claims = _Kind(
        "ResourceClaims",
        kube.list_resource_claims,
        claims_watch,
        holds.claims_listed,
        holds.claim_seen,
    )
    classes = _Kind(
        "DeviceClasses",
        kube.list_device_classes,
        classes_watch,
        holds.classes_listed,
        holds.class_seen,
    )
    await asyncio.gather(
        _follow(runtime, slices), _follow(runtime, claims), _follow(runtime, classes)
    )
