"""Every ResourceClaim, ResourceSlice and DeviceClass, followed (`list_watch`) into
`Runtime.dra_holds` and the ledger (I/O); the extender judges DRA pods by the same copies
(`dra_extender`). A cluster without `resource.k8s.io/v1` (404) is asked again rarely.
Nodes whose holds change are booked again at once; pods and groups waiting on a node a
claim freed are judged again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any

from numatopo_kube import Listing, WatchEvent
from numatopo_operator import assigning, list_watch
from numatopo_operator.background import supervised
from numatopo_operator.errors import kept_serving
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

ABSENT_RETRY_SECONDS = 300.0
"""How often a cluster that does not serve resource.k8s.io/v1 is asked again."""


async def _booked(runtime: Runtime, nodes: set[str]) -> None:
    """Book `nodes`' holds again; judge again what waits where a claim freed devices."""
    freed = []
    for node in sorted(nodes):
        runtime.ledger.mark_dirty(node)  # `status.dra` may change with the slices
        before = dict(runtime.ledger.dra_holds(node))
        if runtime.dra_holds.sync(runtime.ledger, node) and any(
            runtime.ledger.dra_holds(node).get(key) != hold for key, hold in before.items()
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


def _followed(
    runtime: Runtime,
    name: str,
    listing: Callable[[], Awaitable[Listing]],
    watching: Callable[[str | None], AsyncIterator[WatchEvent]],
    *,
    listed: Callable[[Iterable[Mapping[str, Any]]], set[str]],
    seen: Callable[[bool, Mapping[str, Any]], set[str]],
) -> list_watch.Followed:
    """One kind, every node whose holds its list or events change booked again."""

    async def booked_listed(items: list[dict[str, Any]]) -> None:
        await _booked(runtime, listed(items))

    def booked_seen(type: str, body: dict[str, Any]) -> Awaitable[None]:
        return _booked(runtime, seen(type == "DELETED", body))

    return list_watch.Followed(
        name, listing, watching, booked_listed, booked_seen, ABSENT_RETRY_SECONDS
    )


async def follow_dra(runtime: Runtime) -> None:
    """Follow claims, slices and classes until cancelled."""
    kube, holds = runtime.kube, runtime.dra_holds
    kinds = [
        _followed(
            runtime,
            "ResourceSlices",
            kube.list_resource_slices,
            lambda version: kube.watch_resource_slices(resource_version=version),
            listed=holds.slices_listed,
            seen=holds.slice_seen,
        ),
        _followed(
            runtime,
            "ResourceClaims",
            kube.list_resource_claims,
            lambda version: kube.watch_resource_claims(resource_version=version),
            listed=holds.claims_listed,
            seen=holds.claim_seen,
        ),
        _followed(
            runtime,
            "DeviceClasses",
            kube.list_device_classes,
            lambda version: kube.watch_device_classes(resource_version=version),
            listed=holds.classes_listed,
            seen=holds.class_seen,
        ),
    ]
    await asyncio.gather(
        *(
            supervised(runtime.metrics, f"{kind.name} feed", partial(list_watch.follow, kind))
            for kind in kinds
        )
    )
