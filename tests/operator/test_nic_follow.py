"""Follow keeps the RDMA NICs a container really holds: the real operator (kopf over
HTTP, kmock's emulator) realigns a pod whose `observed` (computed by the agent's own
`follow.observe`) says the kubelet's RDMA plugin gave it other NICs than assigned, and
the new assignment names exactly those NICs, not ones chosen again."""

from __future__ import annotations

from typing import Any

import pytest

from numatopo_engine import DEFAULT_RESOURCES
from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment
from numatopo_engine.model import Nic, NumatopologySpec, PathType, PciPath
from numatopo_exporter.agent.follow import observe

from .test_gpu_follow import assignment_of, uuid_of, with_uuids

NODE = "h100-a"
RDMA = "rdma/ib"


def pci_of(nic: int) -> str:
    return f"0000:{0x18 + nic:02x}:00.0"


def with_nics(spec: NumatopologySpec) -> NumatopologySpec:
    """One NIC per GPU, on its PCIe switch (PIX), the others of its socket NODE."""
    numa = {g.index: g.numa for g in spec.gpus}
    nics = [Nic(name=f"mlx5_{g}", pci_bus_id=pci_of(g), numa=numa[g], resource=RDMA)
            for g in sorted(numa)]  # fmt: skip
    paths = [
        PciPath(
            gpu=g,
            nic=f"mlx5_{n}",
            path=PathType.PIX if g == n else PathType.NODE if numa[g] == numa[n] else PathType.SYS,
        )
        for g in numa
        for n in numa
    ]
    return spec.model_copy(update={"nics": nics, "pci_paths": paths})


def with_nic_request(body: dict[str, Any]) -> dict[str, Any]:
    for key in ("requests", "limits"):
        body["spec"]["containers"][0]["resources"][key][RDMA] = 1
    return body


async def _realigned_around(env: Any, gpu_of: Any, nic_of: Any) -> tuple[dict[str, Any], ...]:
    """Assign a pod 1 GPU + 1 NIC, report it holding GPU `gpu_of(assigned gpu)` and NIC
    `nic_of(that gpu)` (by PCI address, as the SR-IOV plugin names it), wait until it
    is realigned; (first assignment, realigned assignment, held GPU, held NIC)."""
    cluster, start_operator, h100, pod, topology_object, wait = env.parts()
    spec = with_nics(with_uuids(h100))
    await cluster.create_numatopology(topology_object(NODE, spec))
    await start_operator()
    await cluster.create_pod(with_nic_request(pod("train", gpus=1, cpu="4")))
    await wait(lambda: assignment_of(cluster, "train") is not None, what="first assignment")
    first = assignment_of(cluster, "train")
    assert first is not None
    gpu = first["containers"]["main"]["gpuIndices"][0]
    assert first["containers"]["main"]["nics"] == [f"mlx5_{gpu}"], "the NIC on its switch"
    held_gpu, held_nic = gpu_of(gpu), nic_of(gpu)
    seen = observe(
        Assignment.model_validate(first),
        {"main": {"nvidia.com/gpu": [uuid_of(held_gpu)], RDMA: [pci_of(held_nic)]}},
        containers=["main"],
        is_gpu=DEFAULT_RESOURCES.is_gpu,
        is_nic=DEFAULT_RESOURCES.is_nic,
        nics=spec.nics,
    )
    assert seen is not None
    assert seen.mismatched == ["main"]
    await cluster.patch_pod(
        "train", {"metadata": {"annotations": {keys.OBSERVED: seen.to_annotation()}}}
    )

    def realigned() -> bool:
        now = assignment_of(cluster, "train")
        return now is not None and now["seq"] > first["seq"]

    await wait(realigned, what="realigned", timeout=15)
    now = assignment_of(cluster, "train")
    assert now is not None
    return first, now, held_gpu, held_nic


@pytest.mark.timeout(60)
async def test_a_nic_only_mismatch_realigns_the_pod_onto_the_nic_it_holds(env: Any) -> None:
    def other_nic_of_its_socket(gpu: int) -> int:
        return gpu ^ 1  # same NUMA node, another PCIe switch

    first, now, held_gpu, held_nic = await _realigned_around(
        env, lambda gpu: gpu, other_nic_of_its_socket
    )
    assert now["containers"]["main"]["gpuIndices"] == [held_gpu]
    assert now["containers"]["main"]["nics"] == [f"mlx5_{held_nic}"]
    assert now["containers"]["main"]["mems"] == first["containers"]["main"]["mems"]


@pytest.mark.timeout(60)
async def test_a_gpu_realignment_keeps_the_nic_held_not_the_one_beside_the_new_gpu(
    env: Any,
) -> None:
    def gpu_of_the_other_socket(gpu: int) -> int:
        return (gpu + 4) % 8

    def nic_next_to_it_not_on_its_switch(gpu: int) -> int:
        return gpu_of_the_other_socket(gpu) ^ 1

    _, now, held_gpu, held_nic = await _realigned_around(
        env, gpu_of_the_other_socket, nic_next_to_it_not_on_its_switch
    )
    assert now["containers"]["main"]["gpuIndices"] == [held_gpu]
    assert now["containers"]["main"]["nics"] == [f"mlx5_{held_nic}"]
