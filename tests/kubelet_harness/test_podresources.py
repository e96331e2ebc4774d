"""PodResources List and Get report exactly what the device manager allocated."""

from __future__ import annotations

import random

import grpc
import pytest

from kubelet_harness import Container, Harness, Pod
from kubelet_harness.vendor_plugin import gpus

GPU = "nvidia.com/gpu"


def reported(pod_resources) -> dict[str, set[tuple[str, int]]]:  # type: ignore[no-untyped-def]
    found: dict[str, set[tuple[str, int]]] = {}
    for container in pod_resources.containers:
        for devices in container.devices:
            assert devices.resource_name == GPU
            assert len(devices.device_ids) == 1
            (node,) = devices.topology.nodes
            found.setdefault(container.name, set()).add((devices.device_ids[0], node.ID))
    return found


async def test_list_and_get_report_the_allocation_with_topology() -> None:
    fleet = gpus(8)
    numa = {g.id: g.numa for g in fleet}
    async with Harness(rng=random.Random(1)) as h:
        await h.start_plugin(fleet)
        the_pod = Pod(
            "a",
            "trainer",
            namespace="ml",
            containers=(
                Container("main", {GPU: 3}, numa_affinity=frozenset({1})),
                Container("log"),
            ),
            init_containers=(Container("side", {GPU: 1}, restartable=True),),
        )
        result = await h.admit(the_pod)
        expected = {name: {(i, numa[i]) for i in result.ids(name)} for name in ("main", "side")}

        (listed,) = (await h.list_pod_resources()).pod_resources
        got = (await h.get_pod_resources("trainer", "ml")).pod_resources

        for pod_resources in (listed, got):
            assert (pod_resources.name, pod_resources.namespace) == ("trainer", "ml")
            assert [c.name for c in pod_resources.containers] == ["side", "main", "log"]
            assert reported(pod_resources) == expected


async def test_a_removed_pod_is_gone_and_its_devices_free() -> None:
    async with Harness(rng=random.Random(2)) as h:
        await h.start_plugin(gpus(2))
        first = await h.admit(Pod("a", "one", containers=(Container("c", {GPU: 2}),)))

        h.remove_pod("a")

        assert (await h.list_pod_resources()).pod_resources == []
        second = await h.admit(Pod("b", "two", containers=(Container("c", {GPU: 2}),)))
        assert second.ids("c") == first.ids("c")
        with pytest.raises(grpc.aio.AioRpcError, match="not found"):
            await h.get_pod_resources("one")
