"""The extender's `/bind` of a DRA pod kube-scheduler scheduled (no gate), end to end:
the real operator over HTTP against kmock's emulator with an AWS p4d node (GPUs 0-3 on
NUMA 0, 4-7 on NUMA 1) and NVIDIA-shaped ResourceSlices.

The test plays kube-scheduler's DynamicResources plugin: in PreBind, before the
extender's bind, it writes the claim's `status.allocation` and `reservedFor`."""

from __future__ import annotations

import json
from typing import Any

from dra_objects import claim, request
from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet

from .conftest import Cluster
from .test_dra_cluster import CLAIMS, FAST, NODE, build, dra_pod, free, spec, stored, valid

NUMA1_GPUS = [4, 5]


async def allocate(cluster: Cluster, name: str, pod: str, gpus: list[int]) -> None:
    """What the scheduler's DynamicResources plugin writes in PreBind."""
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": f"gpu-{g}"}
        for g in gpus
    ]
    selector = {"key": "metadata.name", "operator": "In", "values": [NODE]}
    uid = cluster.pod(pod)["metadata"]["uid"]
    status = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
        },
        "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}],
    }
    async with cluster.api.patch(f"{CLAIMS}/{name}/status", json={"status": status}) as response:
        assert response.status < 300, await response.text()
    obj = stored(cluster, "resourceclaims", name)
    assert obj is not None
    valid(obj)


def scheduled(name: str, claims: list[str]) -> dict[str, Any]:
    pod = dra_pod(name, claims)
    del pod["spec"]["schedulingGates"]
    return pod


async def test_bind_places_cpus_next_to_the_devices_the_scheduler_allocated(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """The scheduler's allocator gave the pod's claim GPUs 4 and 5 (NUMA 1): the
    assignment /bind writes names them, with CPUs and memory on NUMA 1. Decided from its
    requests alone (no device-plugin GPU), the pod's CPUs would go anywhere."""
    await build(cluster)
    await cluster.create(CLAIMS, claim("pair", [request("gpu", "gpu.nvidia.com", 2)]))
    await cluster.create_pod(scheduled("train", ["pair"]))
    bindings = cluster.emulate_binding()
    running = await start_operator(**FAST)
    await allocate(cluster, "pair", "train", NUMA1_GPUS)
    await wait(lambda: free(cluster)[0] == 6, what="the claim's GPUs booked as a hold")

    status, result = await running.post("/bind", cluster.binding_args("train", NODE))

    assert (status, result) == (200, {"Error": ""})
    assert [b["target"]["name"] for b in bindings] == [NODE]
    assignment = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])
    main = assignment["containers"]["main"]
    numa1 = next(n for n in spec().numa_nodes if n.id == 1).cpus
    assert sorted(main["gpuIndices"]) == NUMA1_GPUS
    assert set(CPUSet.parse(main["cpus"])) <= set(numa1), main["cpus"]
    assert main["mems"] == "1"
    # Its GPUs are booked once (the pod's, not also the hold's), the other six free.
    await wait(lambda: free(cluster)[0] == 6, what="six GPUs free")
    assert "default/train" in running.runtime.ledger.state(NODE).assignments


async def test_bind_says_when_a_claim_is_not_allocated_and_decides_as_before(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    await build(cluster)
    await cluster.create(CLAIMS, claim("later", [request("gpu", "gpu.nvidia.com", 2)]))
    await cluster.create_pod(scheduled("train", ["later"]))
    bindings = cluster.emulate_binding()
    running = await start_operator(**FAST)
    await wait(lambda: NODE in set(running.runtime.ledger.nodes()), what="node known")

    status, result = await running.post("/bind", cluster.binding_args("train", NODE))

    assert (status, result) == (200, {"Error": ""})
    assert len(bindings) == 1
    assignment = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])
    assert assignment["containers"]["main"].get("gpuIndices", []) == []
    await wait(  # posted off the answer's path
        lambda: "DRAClaimsNotFollowed" in {r for r, _ in cluster.events_for("train")},
        what="the Event posted",
    )
    said = [m for r, m in cluster.events_for("train") if r == "DRAClaimsNotFollowed"]
    assert said, cluster.events_for("train")
    assert "claim later is not allocated yet" in said[0]
