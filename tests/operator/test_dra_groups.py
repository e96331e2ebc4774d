"""Group placement on a DRA cluster, end to end (the real operator over HTTP against
kmock's emulator, an AWS p4d node with NVIDIA-shaped ResourceSlices, GPUs 0-3 on NUMA 0
and 4-7 on NUMA 1): group members that also carry the `numatopo.io/dra` gate are placed
by their group, and their claims are left to kube-scheduler on the planned node, never
allocated a second way; at `/bind` a member's assignment follows the devices the
scheduler allocated its claims; the group placer counts what other claims hold."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from dra_objects import claim, gpu_slice, request
from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet

from .conftest import Cluster, make_pod, numatopology
from .test_dra_bind import NUMA1_GPUS, allocate
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
    spec,
    stored,
)

GROUP_GATE = keys.GROUP


def gates(cluster: Cluster, name: str) -> list[str]:
    return [g["name"] for g in cluster.pod(name)["spec"].get("schedulingGates") or []]


def reasons(cluster: Cluster, name: str) -> list[str]:
    return [r for r, _ in cluster.events_for(name)]


async def test_group_members_whose_claims_numatopo_cannot_judge_leave_them_to_the_scheduler(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """No DeviceClass: numatopo cannot read the members' claims as the allocator would,
    so the plan counts no device for them (their CPUs only), and once released onto the
    planned node their claims are left to kube-scheduler there, never allocated a second
    way."""
    await build(cluster, classes_too=False)
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
        assert main_of(cluster, name)["gpuIndices"] == []
        await wait(lambda name=name: "DRALeftToScheduler" in reasons(cluster, name), what="Event")
        assert "DRAAllocated" not in reasons(cluster, name)
        said = [m for r, m in cluster.events_for(name) if r == "DRALeftToScheduler"]
        assert "its plan names no device" in said[0], said
    assert allocated(cluster, "c0") == []
    assert allocated(cluster, "c1") == []


async def released_group(cluster: Cluster, start_operator: Any, wait: Any) -> Any:
    """Two members (2 claimed GPUs, 8 CPUs each, no `numatopo.io/dra` gate: their claims
    are kube-scheduler's to allocate) placed by their group, which counted their claimed
    GPUs (m0 on NUMA 0's first two, m1 the next two), and released, as kube-scheduler then
    finds them; the running operator."""
    await build(cluster)
    for rank in range(2):
        await cluster.create(CLAIMS, claim(f"c{rank}", [request("gpu", "gpu.nvidia.com", 2)]))
        pod = dra_pod(f"m{rank}", [f"c{rank}"], policy="best-effort")
        pod["metadata"]["annotations"].update({keys.GROUP: "g", keys.GROUP_SIZE: "2"})
        pod["spec"]["schedulingGates"] = [{"name": GROUP_GATE}]
        await cluster.create_pod(pod)
    running = await start_operator(**FAST)
    for name in ("m0", "m1"):
        await wait(lambda name=name: not gates(cluster, name), what=f"{name} released")
    return running


def main_of(cluster: Cluster, name: str) -> dict[str, Any]:
    assignment = json.loads(cluster.annotations(name)[keys.ASSIGNMENT])
    return dict(assignment["containers"]["main"])


async def test_a_members_assignment_follows_the_devices_its_claims_got_at_bind(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """The group placed m0 with two GPUs its claim may have on NUMA 0 (its claimed
    GPUs counted, none allocated: the claim is kube-scheduler's); kube-scheduler then
    allocated its claim GPUs 4 and 5 on NUMA 1. Its bind replaces the group's assignment
    by one naming those GPUs with CPUs and memory on NUMA 1, on the same node, under the
    same placement record, and the group worker leaves it so (no new plan, no recovery)."""
    running = await released_group(cluster, start_operator, wait)
    planned = main_of(cluster, "m0")
    placement = cluster.annotations("m0")[keys.GROUP_PLACEMENT]
    numa1 = set(next(n for n in spec().numa_nodes if n.id == 1).cpus)
    assert len(planned["gpuIndices"]) == 2
    assert not set(planned["gpuIndices"] + main_of(cluster, "m1")["gpuIndices"]) & set(NUMA1_GPUS)
    assert not set(CPUSet.parse(planned["cpus"])) <= numa1
    assert allocated(cluster, "c0") == []
    await wait(lambda: free(cluster)[0] == 4, what="the plans' GPUs booked")
    bindings = cluster.emulate_binding()
    await allocate(cluster, "c0", "m0", NUMA1_GPUS)
    await wait(lambda: free(cluster)[0] == 2, what="the claim's GPUs booked as a hold")

    status, result = await running.post("/bind", cluster.binding_args("m0", NODE))

    assert (status, result) == (200, {"Error": ""})
    assert [b["target"]["name"] for b in bindings] == [NODE]
    main = main_of(cluster, "m0")
    assert sorted(main["gpuIndices"]) == NUMA1_GPUS
    assert set(CPUSet.parse(main["cpus"])) <= numa1, main["cpus"]
    assert main["mems"] == "1"
    annotations = cluster.annotations("m0")
    assert annotations[keys.GROUP_PLACEMENT] == placement
    assert json.loads(annotations[keys.ASSIGNMENT])["node"] == NODE
    assert "DRAClaimsNotFollowed" not in reasons(cluster, "m0")
    # Booked once, as the pod's: its GPUs are no longer counted twice (hold and pod),
    # and the plan's GPUs are free again.
    await wait(lambda: free(cluster)[0] == 4, what="four GPUs free")
    booked = running.runtime.ledger.state(NODE).assignments["default/m0"]
    assert sorted(booked.containers["main"].gpu_indices) == NUMA1_GPUS
    await asyncio.sleep(1.0)  # the group worker has seen the new assignment by now
    assert main_of(cluster, "m0") == main
    assert cluster.annotations("m0")[keys.GROUP_PLACEMENT] == placement
    assert not {"GroupRecovered", "GroupInvalid"} & set(reasons(cluster, "m0"))


async def test_a_bind_again_after_a_failed_binding_keeps_the_followed_assignment(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """The Binding failed after the member's assignment followed its claims: the member
    stays pinned to its node, so the assignment stays; kube-scheduler's next `/bind`
    finds it naming the claimed devices already and decides nothing again."""
    running = await released_group(cluster, start_operator, wait)
    bindings = cluster.emulate_binding(fail=True)
    await allocate(cluster, "c0", "m0", NUMA1_GPUS)
    await wait(lambda: free(cluster)[0] == 2, what="the claim's GPUs booked as a hold")

    _, first = await running.post("/bind", cluster.binding_args("m0", NODE))
    followed = cluster.annotations("m0")[keys.ASSIGNMENT]
    _, again = await running.post("/bind", cluster.binding_args("m0", NODE))

    assert "failed" in first["Error"]
    assert "failed" in again["Error"]
    assert len(bindings) == 2
    assert sorted(main_of(cluster, "m0")["gpuIndices"]) == NUMA1_GPUS
    assert cluster.annotations("m0")[keys.ASSIGNMENT] == followed


async def test_a_member_whose_claims_are_not_allocated_at_bind_keeps_its_groups_cpus(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Nothing to follow: the member keeps its group's assignment (the GPUs its plan
    counted, CPUs and memory beside them), is bound, and the Event says why."""
    running = await released_group(cluster, start_operator, wait)
    planned = cluster.annotations("m1")[keys.ASSIGNMENT]
    gpus = main_of(cluster, "m1")["gpuIndices"]
    bindings = cluster.emulate_binding()

    status, result = await running.post("/bind", cluster.binding_args("m1", NODE))

    assert (status, result) == (200, {"Error": ""})
    assert len(bindings) == 1
    assert cluster.annotations("m1")[keys.ASSIGNMENT] == planned
    assert len(main_of(cluster, "m1")["gpuIndices"]) == 2
    assert main_of(cluster, "m1")["gpuIndices"] == gpus
    await wait(  # posted off the answer's path
        lambda: "DRAClaimsNotFollowed" in reasons(cluster, "m1"), what="the Event posted"
    )
    said = [m for r, m in cluster.events_for("m1") if r == "DRAClaimsNotFollowed"]
    assert said, cluster.events_for("m1")
    assert "where its group placed them" in said[0]
    assert "claim c1 is not allocated yet" in said[0]


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


def claim_pools(cluster: Cluster, name: str) -> set[str]:
    found = stored(cluster, "resourceclaims", name) or {}
    results = ((found.get("status") or {}).get("allocation") or {}).get("devices", {})
    return {r["pool"] for r in results.get("results", [])}


async def test_a_group_plan_counts_its_members_claimed_gpus(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Six of the eight DRA GPUs held by another scheduler's claim: two members each
    claiming 2 GPUs do not both fit on the node (planned by their CPUs alone they would,
    and kube-scheduler could then allocate only one member's claim). The group waits,
    also while a second node publishes no DRA GPUs; once it does, the plan puts at most
    one member on the first,
    names each member's GPUs in its assignment, and the claims are allocated exactly
    those GPUs, none held by the other claim."""
    await build(cluster)
    await cluster.create(CLAIMS, claim("theirs", [request("gpu", "gpu.nvidia.com", 6)]))
    theirs = [f"gpu-{i}" for i in range(6)]
    for rank in range(2):
        await cluster.create(CLAIMS, claim(f"c{rank}", [request("gpu", "gpu.nvidia.com", 2)]))
        pod = dra_pod(f"m{rank}", [f"c{rank}"], policy="best-effort")
        pod["metadata"]["annotations"].update({keys.GROUP: "g", keys.GROUP_SIZE: "2"})
        pod["spec"]["schedulingGates"] = [{"name": GROUP_GATE}, {"name": keys.DRA_GATE}]
        await cluster.create_pod(pod)
    await hold(cluster, "theirs", [("gpu", d) for d in theirs])
    await start_operator(**FAST)
    await wait(lambda: free(cluster)[0] == 2, what="the claim booked")

    await wait(lambda: "GroupUnsatisfiable" in reasons(cluster, "m0"), what="group waits")
    assert gates(cluster, "m0") == [GROUP_GATE, keys.DRA_GATE]
    assert allocated(cluster, "c0") == allocated(cluster, "c1") == []

    # A second node whose GPUs no DRA driver publishes (yet) cannot serve the claims.
    other = "p4d-b"
    await cluster.create_node(other)
    await cluster.create_numatopology(numatopology(other, spec()))

    def left_out() -> bool:
        said = [m for r, m in cluster.events_for("m0") if r == "GroupUnsatisfiable"]
        return any(f"{other}: member" in m and "publishes no DRA devices" in m for m in said)

    await wait(left_out, what="the node without DRA devices left out, said")
    assert gates(cluster, "m0") == [GROUP_GATE, keys.DRA_GATE]

    await cluster.create("/apis/resource.k8s.io/v1/resourceslices", gpu_slice(other, spec()))
    for name in ("m0", "m1"):
        await wait(lambda name=name: not gates(cluster, name), what=f"{name} released",
                   timeout=15)  # fmt: skip
    nodes = {}
    for rank in range(2):
        name = f"m{rank}"
        node = cluster.pod(name)["spec"]["nodeSelector"]["kubernetes.io/hostname"]
        nodes[name] = node
        planned = sorted(main_of(cluster, name)["gpuIndices"])
        assert len(planned) == 2, planned
        assert allocated(cluster, f"c{rank}") == sorted(f"gpu-{g}" for g in planned)
        assert claim_pools(cluster, f"c{rank}") == {node}
        if node == NODE:
            assert not set(allocated(cluster, f"c{rank}")) & set(theirs)
        await wait(lambda name=name: "DRAAllocated" in reasons(cluster, name), what="Event")
        assert "DRALeftToScheduler" not in reasons(cluster, name)
    assert list(nodes.values()).count(NODE) <= 1, nodes


async def test_a_group_waits_for_its_members_claims_to_exist(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Members whose claims are not created yet (kube-controller-manager makes a
    template's claim after the pod): planned now, their GPUs would not be counted. The
    group waits, saying which claim it waits for, and is planned with them once they
    exist."""
    await build(cluster)
    for rank in range(2):
        pod = dra_pod(f"m{rank}", [f"c{rank}"], policy="best-effort")
        pod["metadata"]["annotations"].update({keys.GROUP: "g", keys.GROUP_SIZE: "2"})
        pod["spec"]["schedulingGates"] = [{"name": GROUP_GATE}, {"name": keys.DRA_GATE}]
        await cluster.create_pod(pod)
    await start_operator(**FAST)

    await wait(lambda: "GroupUnsatisfiable" in reasons(cluster, "m0"), what="group waits")
    said = [m for r, m in cluster.events_for("m0") if r == "GroupUnsatisfiable"]
    assert "claim c0 does not exist yet" in said[0] or "claim c1 does not exist yet" in said[0]
    assert gates(cluster, "m0") == [GROUP_GATE, keys.DRA_GATE]

    for rank in range(2):
        await cluster.create(CLAIMS, claim(f"c{rank}", [request("gpu", "gpu.nvidia.com", 2)]))
    for rank in range(2):
        name = f"m{rank}"
        await wait(lambda name=name: not gates(cluster, name), what=f"{name} released",
                   timeout=15)  # fmt: skip
        assert len(main_of(cluster, name)["gpuIndices"]) == 2
        await wait(lambda rank=rank: len(allocated(cluster, f"c{rank}")) == 2, what="allocated")
