"""The agent's PodResources read against the kubelet harness's real gRPC server, at
sizes tenants control: every container of every active pod is listed, so many pods
with many long-named containers make a large answer."""

from __future__ import annotations

import random
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from kubelet_harness.kubelet import Kubelet
from kubelet_harness.pods import Container, Pod
from numatopo_exporter.agent.pod_resources import PodResourcesError, list_holdings


@asynccontextmanager
async def tenant_pods(containers: int) -> AsyncIterator[Path]:
    """A kubelet running 110 tenant pods (its default maxPods) of `containers`
    containers with 63-character names and no devices; its PodResources socket."""
    # Unix socket paths must stay under 108 bytes: a short folder in /tmp.
    with tempfile.TemporaryDirectory(prefix="podres-", dir="/tmp") as folder:
        kubelet = Kubelet(Path(folder), random.Random(1))
        for n in range(110):
            names = [f"c{n:03d}-{i:04d}-".ljust(63, "x") for i in range(containers)]
            pod = Pod(f"uid-{n}", f"tenant-{n}", "tenant", tuple(Container(c) for c in names))
            kubelet.pods[pod.uid] = pod
        await kubelet.start()
        try:
            yield kubelet.pod_resources_socket
        finally:
            await kubelet.stop()


async def test_a_listing_beyond_grpcs_default_4_mib_is_read() -> None:
    """700 containers a pod: about 5 MiB listed. gRPC's default limit on what a client
    receives is 4 MiB; with it the read failed, and Follow went off for every pod of
    the node (GPUs unverified) for as long as the tenant's pods ran."""
    async with tenant_pods(700) as socket:
        holdings = await list_holdings(socket, timeout=30)
    # Every pod listed (a pod not listed is one the kubelet has not admitted yet), and
    # none of its containers holding a device.
    assert len(holdings) == 110
    assert not any(holdings.values())


async def test_a_listing_beyond_the_kubelets_own_16_mib_is_unreadable() -> None:
    """The limit the kubelet's own PodResources client has: past it the node's GPUs are
    unverified, as they are for the kubelet's other consumers."""
    async with tenant_pods(2400) as socket:
        with pytest.raises(PodResourcesError, match="RESOURCE_EXHAUSTED"):
            await list_holdings(socket, timeout=30)
