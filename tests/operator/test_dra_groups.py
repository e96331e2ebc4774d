"""Group placement on a DRA cluster, end to end (the real operator over HTTP against
kmock's emulator, an AWS p4d node with NVIDIA-shaped ResourceSlices): group members that
also carry the `numatopo.io/dra` gate are placed by their group, and their claims are
left to kube-scheduler on the planned node, never allocated a second way; the group
placer counts what other claims hold."""

from __future__ import annotations

from typing import Any

from dra_objects import claim, request
from numatopo_engine import annotations as keys

from .conftest import Cluster, make_pod
from .test_dra_cluster import (
    CLAIMS,
    FAST,
    NODE,
    allocated,
    build,
    deallocate,
    dra_pod,
    free,
    hold,
)

GROUP_GATE = keys.GROUP


def gates(cluster: Cluster, name: str) -> list[str]:
    return [g["name"] for g in cluster.pod(name)["spec"].get("schedulingGates") or []]


def reasons(cluster: Cluster, name: str) -> list[str]:
    return [r for r, _ in cluster.events_for(name)]


async def test_group_members_with_claims_leave_them_to_the_scheduler_on_the_planned_node(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    await build(cluster)
    for rank in range(2):
        await cluster.create(CLAIMS, claim(f"c{rank}", [request("gpu", "gpu.nvidia.com", 2)]))
        pod = dra_pod(f"m{rank}", [f"c{rank}"], policy="best-effort")
        pod["metadata"]["annotations"].update({keys.GROUP: "g", keys.GROUP_SIZE: "2"})
        pod["spec"]["schedulingGates"] = [{"name": GROUP_GATE}, {"name": keys.DRA_GATE}]
        await cluster.create_pod(pod)
    await start_operator(**FAST)

    for name in ("m0", "m1"):
        await wait(lambda name=name: not gates(cluster, name), what=f"{name} released")
        pod = cluster.pod(name)
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": NODE}
        assert keys.GROUP_PLACEMENT in pod["metadata"]["annotations"]
        await wait(lambda name=name: "DRALeftToScheduler" in reasons(cluster, name), what="Event")
        assert "DRAAllocated" not in reasons(cluster, name)
    assert allocated(cluster, "c0") == []
    assert allocated(cluster, "c1") == []


async def test_the_group_placer_counts_what_other_claims_hold(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Six of the eight GPUs held by another scheduler's claim: a group asking 2 x 2
    GPUs does not fit until the claim is deallocated."""
    await build(cluster)
    await cluster.create(CLAIMS, claim("theirs", [request("gpu", "gpu.nvidia.com", 6)]))
    await start_operator(**FAST)
    await hold(cluster, "theirs", [("gpu", f"gpu-{i}") for i in range(6)])
    await wait(lambda: free(cluster)[0] == 2, what="the claim booked")
    for rank in range(2):
        pod = make_pod(f"m{rank}", node=None, gpus=2, cpu="4", policy="best-effort",
                       annotations={keys.GROUP: "g", keys.GROUP_SIZE: "2"})  # fmt: skip
        pod["spec"]["schedulingGates"] = [{"name": GROUP_GATE}]
        await cluster.create_pod(pod)

    await wait(lambda: "GroupUnsatisfiable" in reasons(cluster, "m0"), what="group waits")
    assert gates(cluster, "m0") == [GROUP_GATE]

    await deallocate(cluster, "theirs")
    await wait(lambda: not gates(cluster, "m0") and not gates(cluster, "m1"), what="placed",
               timeout=15)  # fmt: skip
