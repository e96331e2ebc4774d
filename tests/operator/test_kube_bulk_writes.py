"""The writes a burst of decisions makes many of at once (pod annotations, Events, status
patches) go out at most `bulk_writes` at a time through one `KubeClient`; the others
wait their turn, and a call of another kind (a Lease renewal, a Binding, a label)
never waits behind them. Against the emulator, whose pod PATCHes and Event POSTs are
held open a while here so that they pile up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kmock
import pytest

from numatopo_kube import KubeClient

from .conftest import Cluster, make_pod, register_resources

HELD_SECONDS = 0.1
PODS = 40
OTHER = "other"  # the pod labelled meanwhile


class HoldingEmulator(kmock.KubernetesEmulator):
    """Holds every pod PATCH and Event POST open `HELD_SECONDS`, counting how many of
    the burst's are open at once."""

    open_now: int
    most_open: int

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        resource = getattr(request, "resource", None)
        plural = str(resource.plural) if resource is not None else ""
        method = str(getattr(request, "method", "")).upper()
        held = (plural == "pods" and method.endswith("PATCH")) or (
            plural == "events" and method.endswith("POST")
        )
        if not held:
            return await super()._handle(request)
        if getattr(request, "name", None) == OTHER:
            await asyncio.sleep(HELD_SECONDS)
            return await super()._handle(request)
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            await asyncio.sleep(HELD_SECONDS)
            return await super()._handle(request)
        finally:
            self.open_now -= 1


@pytest.fixture
async def holding() -> AsyncIterator[tuple[Cluster, HoldingEmulator]]:
    api = HoldingEmulator()
    api.open_now = api.most_open = 0
    async with api, kmock.Server(api):
        register_resources(api)
        yield Cluster(api), api


async def test_a_burst_of_writes_goes_out_a_few_at_a_time(holding):
    cluster, api = holding
    names = [f"job-{i}" for i in range(PODS)]
    for name in [*names, OTHER]:
        await cluster.create_pod(make_pod(name))
    kube = KubeClient.connect(str(cluster.api.url), bulk_writes=4)

    async def decided(name: str) -> None:
        await kube.patch_pod_annotations("default", name, {"numatopo.io/state": "Assigned"})
        about = {"namespace": "default", "name": name, "uid": f"uid-{name}"}
        await kube.post_event(about, warning=False, reason="NumatopoAssigned", message="ok")

    try:
        burst = asyncio.gather(*(decided(name) for name in names))
        await asyncio.sleep(HELD_SECONDS)  # the burst is queued by now
        labelled = asyncio.get_running_loop().time()
        await kube.patch_pod_labels("default", OTHER, {"numatopo.io/x": "1"})
        labelled = asyncio.get_running_loop().time() - labelled
        await burst
    finally:
        await kube.close()

    assert 4 == api.most_open  # every write went out, never more than four at once
    assert all(cluster.annotations(name)["numatopo.io/state"] == "Assigned" for name in names)
    # The label was not queued behind the burst (ten rounds of four pod PATCHes: 1 s).
    assert labelled < 8 * HELD_SECONDS, labelled
