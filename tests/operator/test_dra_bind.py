"""The extender's `/bind` of a DRA pod kube-scheduler scheduled (no gate), end to end:
the real operator over HTTP against kmock's emulator with an AWS p4d node (GPUs 0-3 on
NUMA 0, 4-7 on NUMA 1) and NVIDIA-shaped ResourceSlices.

The test plays kube-scheduler's DynamicResources plugin: in PreBind, before the
extender's bind, it writes the claim's `status.allocation` and `reservedFor`."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate

from dra_objects import GPU_CLASS_SELECTOR, claim, device_class, request
from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet

from .conftest import Cluster, make_pod
from .test_dra_cluster import CLAIMS, FAST, NODE, build, dra_pod, free, spec, stored, valid

NUMA1_GPUS = [4, 5]


async def allocate(
    cluster: Cluster, name: str, pod: str, gpus: list[int], request_name: str = "gpu"
) -> None:
    """What the scheduler's DynamicResources plugin writes in PreBind."""
    results = [
        {"request": request_name, "driver": "gpu.nvidia.com", "pool": NODE, "device": f"gpu-{g}"}
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

    await bound_beside_numa1(cluster, running, "train", bindings)
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
    said = await not_followed(cluster, wait, "train")
    assert said, cluster.events_for("train")
    assert "claim later is not allocated yet" in said[0]


# -- extended resources DRA serves (KEP-5004) -------------------------------------------

SPECIAL = "train-extended-resources-x7k2q"
"""The claim kube-scheduler creates for a pod's extended resources (generated name)."""
SPECIAL_REQUEST = "container-0-request-0"


def asking(name: str, resource: str, count: int) -> dict[str, Any]:
    """A pod kube-scheduler schedules asking `count` of extended resource `resource`
    (no ResourceClaims of its own)."""
    pod = make_pod(name, node=None, cpu="8", memory="16Gi")
    for amounts in pod["spec"]["containers"][0]["resources"].values():
        amounts[resource] = count
    return pod


async def bound_beside_numa1(cluster: Cluster, running: Any, pod: str, bindings: Any) -> None:
    """/bind of `pod` answers success, binds it to NODE, and its assignment names the GPUs of
    NUMA 1 with CPUs and memory there."""
    status, result = await running.post("/bind", cluster.binding_args(pod, NODE))

    assert (status, result) == (200, {"Error": ""})
    assert [b["target"]["name"] for b in bindings] == [NODE]
    main = json.loads(cluster.annotations(pod)[keys.ASSIGNMENT])["containers"]["main"]
    numa1 = next(n for n in spec().numa_nodes if n.id == 1).cpus
    assert sorted(main["gpuIndices"]) == NUMA1_GPUS
    assert set(CPUSet.parse(main["cpus"])) <= set(numa1), main["cpus"]
    assert main["mems"] == "1"


async def prebind_extended(
    cluster: Cluster, pod: str, device_class: str, resource: str, gpus: list[int] | None
) -> None:
    """What kube-scheduler's DynamicResources plugin does in PreBind for a pod's extended
    resources: creates a claim owned by the pod for them, allocated (`gpus`; None:
    created, not allocated), and names it in the pod's status."""
    body = claim(SPECIAL, [request(SPECIAL_REQUEST, device_class, len(gpus or [0, 0]))])
    uid = cluster.pod(pod)["metadata"]["uid"]
    body["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid, "controller": True}
    ]
    await cluster.create(CLAIMS, body)
    if gpus is not None:
        await allocate(cluster, SPECIAL, pod, gpus, request_name=SPECIAL_REQUEST)
    await extended_claim_status(cluster, pod, SPECIAL, resource)
    kubernetes_validate.validate(cluster.pod(pod), "1.34.0", strict=True)


async def extended_claim_status(cluster: Cluster, pod: str, claim_name: str, resource: str) -> None:
    """Write the pod's `status.extendedResourceClaimStatus` naming `claim_name` for its
    container's `resource` (as kube-scheduler's PreBind does, or as a forger would)."""
    mapping = {"containerName": "main", "resourceName": resource, "requestName": SPECIAL_REQUEST}
    status = {"extendedResourceClaimStatus": {
        "resourceClaimName": claim_name, "requestMappings": [mapping]}}  # fmt: skip
    async with cluster.api.patch(
        f"/api/v1/namespaces/default/pods/{pod}/status", json={"status": status}
    ) as response:
        assert response.status < 300, await response.text()


async def not_followed(cluster: Cluster, wait: Any, pod: str) -> list[str]:
    """The messages of the pod's `DRAClaimsNotFollowed` Events, once one is posted (they are
    posted off the answer's path)."""
    await wait(
        lambda: "DRAClaimsNotFollowed" in {r for r, _ in cluster.events_for(pod)},
        what="the Event posted",
    )
    return [m for r, m in cluster.events_for(pod) if r == "DRAClaimsNotFollowed"]


async def test_bind_follows_the_claim_kube_scheduler_made_for_an_extended_resource(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """DeviceClass `a100` serves `example.com/gpu`; the pod asks 2 and no claim. The
    scheduler's claim for it holds GPUs 4 and 5 (NUMA 1): the assignment names them,
    with CPUs and memory on NUMA 1, booked once."""
    await build(cluster)
    named = device_class("a100", GPU_CLASS_SELECTOR, extended="example.com/gpu")
    await cluster.create("/apis/resource.k8s.io/v1/deviceclasses", named)
    await cluster.create_pod(asking("train", "example.com/gpu", 2))
    bindings = cluster.emulate_binding()
    running = await start_operator(**FAST)
    await prebind_extended(cluster, "train", "a100", "example.com/gpu", NUMA1_GPUS)
    await wait(lambda: free(cluster)[0] == 6, what="the claim's GPUs booked as a hold")

    await bound_beside_numa1(cluster, running, "train", bindings)
    await wait(lambda: free(cluster)[0] == 6, what="six GPUs free")
    assert "DRAClaimsNotFollowed" not in {r for r, _ in cluster.events_for("train")}


async def test_bind_says_when_the_extended_resources_claim_is_missing_or_unallocated(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """The implicit name of class gpu.nvidia.com asked. At the first /bind the pod's
    status names no claim for it; at the second the claim is there but not allocated:
    each time the Event says why, and the pod is decided from its requests."""
    resource = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    await build(cluster)
    await cluster.create_pod(asking("train", resource, 2))
    bindings = cluster.emulate_binding(fail=True)
    running = await start_operator(**FAST)
    await wait(lambda: NODE in set(running.runtime.ledger.nodes()), what="node known")

    def said() -> list[str]:
        return [m for r, m in cluster.events_for("train") if r == "DRAClaimsNotFollowed"]

    await running.post("/bind", cluster.binding_args("train", NODE))
    await wait(lambda: len(said()) == 1, what="the first Event posted")
    assert "claim for its extended resources does not exist yet" in said()[0]
    await prebind_extended(cluster, "train", "gpu.nvidia.com", resource, None)
    await wait(lambda: not cluster.annotations("train").get(keys.ASSIGNMENT), what="taken back")

    await running.post("/bind", cluster.binding_args("train", NODE))

    assert len(bindings) == 2
    await wait(lambda: len(said()) == 2, what="the second Event posted")
    assert f"claim {SPECIAL} is not allocated yet" in said()[1]


async def test_bind_does_not_follow_a_claim_that_is_not_the_pods(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Pod `thief`'s status names the claim kube-scheduler made for pod `victim` (owned
    by and reserved for it, GPUs 4 and 5), as a tenant able to write pod status could:
    the claim is not followed (the Event says why), `thief` is decided from its
    requests, and the victim's GPUs stay held for it. Before, `thief` was given GPUs 4
    and 5 and booked over the victim's hold."""
    await build(cluster)
    named = device_class("a100", GPU_CLASS_SELECTOR, extended="example.com/gpu")
    await cluster.create("/apis/resource.k8s.io/v1/deviceclasses", named)
    await cluster.create_pod(asking("victim", "example.com/gpu", 2))
    await cluster.create_pod(asking("thief", "example.com/gpu", 2))
    bindings = cluster.emulate_binding()
    running = await start_operator(**FAST)
    await prebind_extended(cluster, "victim", "a100", "example.com/gpu", NUMA1_GPUS)
    await wait(lambda: free(cluster)[0] == 6, what="the victim's GPUs booked as a hold")
    await extended_claim_status(cluster, "thief", SPECIAL, "example.com/gpu")

    status, result = await running.post("/bind", cluster.binding_args("thief", NODE))

    assert (status, result) == (200, {"Error": ""})
    assert [b["target"]["name"] for b in bindings] == [NODE]
    main = json.loads(cluster.annotations("thief")[keys.ASSIGNMENT])["containers"]["main"]
    assert not set(main.get("gpuIndices", [])) & set(NUMA1_GPUS), main
    said = await not_followed(cluster, wait, "thief")
    assert f"claim {SPECIAL} is not owned by this pod" in said[0], said
    held = running.runtime.ledger.state(NODE)
    assert f"numatopo.io/dra-claim:default/{SPECIAL}" in held.assignments
    assert free(cluster)[0] == 6


async def test_bind_of_a_pod_whose_status_names_no_valid_claim(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """A status naming `../x` (a path, no claim name): nothing is read from the API
    server, the Event says why, and the pod is decided from its requests. Before, every
    /bind of the pod failed with the client layer's refusal of the name."""
    await build(cluster)
    named = device_class("a100", GPU_CLASS_SELECTOR, extended="example.com/gpu")
    await cluster.create("/apis/resource.k8s.io/v1/deviceclasses", named)
    await cluster.create_pod(asking("train", "example.com/gpu", 2))
    bindings = cluster.emulate_binding()
    running = await start_operator(**FAST)
    await wait(lambda: NODE in set(running.runtime.ledger.nodes()), what="node known")
    await extended_claim_status(cluster, "train", "../x", "example.com/gpu")

    status, result = await running.post("/bind", cluster.binding_args("train", NODE))

    assert (status, result) == (200, {"Error": ""})
    assert len(bindings) == 1
    said = await not_followed(cluster, wait, "train")
    assert "'../x' is not a valid name" in said[0], said
