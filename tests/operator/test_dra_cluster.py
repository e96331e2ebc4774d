"""GPUs on DRA clusters, end to end: the real operator (kopf over HTTP) against kmock's
emulator holding an AWS p4d node (8x A100 NVLink, 4 EFA NICs), its Numatopology, the
ResourceSlices of NVIDIA's GPU driver and dranet, DeviceClasses and ResourceClaims.

The test plays kube-controller-manager's resourceclaim controller where it matters: when
a pod is deleted, its claims' reservation and allocation are cleared (`deallocate`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate

from dra_objects import (
    CPU_CLASS_SELECTOR,
    GPU_CLASS_SELECTOR,
    RDMA_CLASS_SELECTOR,
    allocation_problems,
    claim,
    cpu_slice,
    device_class,
    gpu_slice,
    nic_slice,
    request,
)
from foreign_schemas import nrt_errors
from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Numatopology

from .conftest import Cluster, make_pod, numatopology
from .test_exports_cluster import available, nrts, register_foreign

NODE = "p4d-a"
TOPOLOGY = Path(__file__).resolve().parents[1] / "fixtures" / "topologies" / "aws-p4d.json"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
FAST = {"retry_base_seconds": 0.1, "retry_max_seconds": 0.5}
GPU_POOL = f"gpu.nvidia.com/{NODE}"
"""The NRT resource of the node's DRA GPUs: their driver and pool."""


def spec() -> Any:
    return Numatopology.model_validate(json.loads(TOPOLOGY.read_text())).spec


def classes() -> dict[str, dict[str, Any]]:
    return {
        "gpu.nvidia.com": device_class("gpu.nvidia.com", GPU_CLASS_SELECTOR),
        "rdma.dra.net": device_class("rdma.dra.net", RDMA_CLASS_SELECTOR),
    }


async def build(
    cluster: Cluster, node: str = NODE, *, classes_too: bool = True
) -> list[dict[str, Any]]:
    await cluster.create_node(node)
    await cluster.create_numatopology(numatopology(node, spec()))
    slices = [gpu_slice(node, spec()), nic_slice(node, spec())]
    for body in slices:
        await cluster.create("/apis/resource.k8s.io/v1/resourceslices", body)
    for body in classes().values() if classes_too else ():
        await cluster.create("/apis/resource.k8s.io/v1/deviceclasses", body)
    return slices


def dra_pod(name: str, claims: list[str], policy: str = "single-numa-node") -> dict[str, Any]:
    body = make_pod(name, node=None, cpu="8", memory="16Gi", policy=policy)
    body["spec"]["schedulingGates"] = [{"name": keys.DRA_GATE}]
    body["spec"]["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": c} for c in claims]
    return body


def stored(cluster: Cluster, plural: str, name: str) -> dict[str, Any] | None:
    for (resource, _, found), obj in list(cluster.api.objects.items()):
        if str(resource.plural) == plural and found == name and not obj.deleted:
            return dict(json.loads(json.dumps(dict(obj.raw))))
    return None


def allocated(cluster: Cluster, name: str) -> list[str]:
    found = stored(cluster, "resourceclaims", name) or {}
    allocation = (found.get("status") or {}).get("allocation") or {}
    return sorted(r["device"] for r in allocation.get("devices", {}).get("results", []))


def gated(cluster: Cluster, name: str) -> bool:
    return any(
        g["name"] == keys.DRA_GATE
        for g in cluster.pods()[name]["spec"].get("schedulingGates") or []
    )


async def deallocate(cluster: Cluster, name: str) -> None:
    """What the resourceclaim controller does once the claim's last consumer is gone."""
    async with cluster.api.patch(
        f"{CLAIMS}/{name}/status", json={"status": {"allocation": None, "reservedFor": []}}
    ) as response:
        assert response.status < 300, await response.text()
    async with cluster.api.patch(
        f"{CLAIMS}/{name}", json={"metadata": {"finalizers": []}}
    ) as response:
        assert response.status < 300, await response.text()


def valid(obj: dict[str, Any]) -> None:
    clean = {k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec", "status") if k in obj}
    clean["metadata"] = {
        k: v
        for k, v in clean["metadata"].items()
        if k in ("name", "namespace", "uid", "finalizers", "resourceVersion")
    }
    kubernetes_validate.validate(clean, "1.34.0", strict=True)


async def test_claims_are_allocated_aligned_and_freed_with_the_pod(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    slices = await build(cluster)
    await cluster.create(CLAIMS, claim("three", [request("gpu", "gpu.nvidia.com", 3)]))
    pair = claim(
        "pair",
        [request("gpu", "gpu.nvidia.com", 1), request("nic", "rdma.dra.net", 1)],
        constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
    )
    await cluster.create(CLAIMS, pair)
    await cluster.create_pod(dra_pod("train", ["three", "pair"]))
    await start_operator(**FAST)

    await wait(lambda: not gated(cluster, "train"), what="train released")
    three, pair_obj = (
        stored(cluster, "resourceclaims", "three"),
        stored(cluster, "resourceclaims", "pair"),
    )
    assert three is not None
    assert pair_obj is not None
    for obj in (three, pair_obj):
        valid(obj)
        assert allocation_problems(obj, NODE, slices, classes()) == []
        assert obj["status"]["reservedFor"] == [
            {"resource": "pods", "name": "train", "uid": cluster.pods()["train"]["metadata"]["uid"]}
        ]
        assert "resource.kubernetes.io/delete-protection" in obj["metadata"]["finalizers"]
    gpus = {
        int(d.split("-")[1])
        for d in allocated(cluster, "three") + allocated(cluster, "pair")
        if d.startswith("gpu-")
    }
    assert len(gpus) == 4
    assert len({g // 4 for g in gpus}) == 1, f"GPUs {gpus} span both NUMA nodes"
    pod = cluster.pods()["train"]
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": NODE}
    assignment = json.loads(pod["metadata"]["annotations"][keys.ASSIGNMENT])
    assert sorted(assignment["containers"]["main"]["gpuIndices"]) == sorted(gpus)
    await wait(lambda: "DRAAllocated" in {r for r, _ in cluster.events_for("train")}, what="Event")

    # 8 GPUs (both NUMA nodes: best-effort) do not fit while train holds 4: it waits, gated.
    await cluster.create(CLAIMS, claim("eight", [request("gpu", "gpu.nvidia.com", 8)]))
    await cluster.create_pod(dra_pod("big", ["eight"], policy="best-effort"))
    await wait(
        lambda: "DRAUnsatisfiable" in {r for r, _ in cluster.events_for("big")}, what="big waits"
    )
    assert gated(cluster, "big")
    assert allocated(cluster, "eight") == []

    # train ends, its claims are deallocated: big gets all eight.
    await cluster.delete_pod("train")
    await deallocate(cluster, "three")
    await deallocate(cluster, "pair")
    await wait(lambda: not gated(cluster, "big"), what="big released", timeout=15)
    assert allocated(cluster, "eight") == [f"gpu-{i}" for i in range(8)]


async def test_devices_other_claims_hold_are_not_handed_out(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    await build(cluster)
    other = claim("theirs", [request("gpu", "gpu.nvidia.com", 2)])
    await cluster.create(CLAIMS, other)
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": f"gpu-{i}"}
        for i in (0, 4)
    ]
    selector = {"key": "metadata.name", "operator": "In", "values": [NODE]}
    held = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
        },
        "reservedFor": [{"resource": "pods", "name": "elsewhere", "uid": "uid-elsewhere"}],
    }
    async with cluster.api.patch(f"{CLAIMS}/theirs/status", json={"status": held}) as response:
        assert response.status < 300
    await cluster.create(CLAIMS, claim("mine", [request("gpu", "gpu.nvidia.com", 6)]))
    await cluster.create_pod(dra_pod("train", ["mine"], policy="best-effort"))
    await start_operator(**FAST)
    await wait(lambda: not gated(cluster, "train"), what="train released")
    assert allocated(cluster, "mine") == ["gpu-1", "gpu-2", "gpu-3", "gpu-5", "gpu-6", "gpu-7"]


async def test_a_claim_numatopo_cannot_judge_is_left_to_the_scheduler(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    await build(cluster)
    selector = 'device.attributes["gpu.nvidia.com"].productName.matches("A100")'
    await cluster.create(CLAIMS, claim("regex", [request("gpu", "gpu.nvidia.com", 2, selector)]))
    await cluster.create_pod(dra_pod("train", ["regex"]))
    await start_operator(**FAST)
    await wait(
        lambda: "DRALeftToScheduler" in {r for r, _ in cluster.events_for("train")}, what="Event"
    )
    assert not gated(cluster, "train")
    assert allocated(cluster, "regex") == []
    assert "nodeSelector" not in cluster.pods()["train"]["spec"]
    ((_, message),) = [(r, m) for r, m in cluster.events_for("train") if r == "DRALeftToScheduler"]
    assert "matches()" in message


async def hold(cluster: Cluster, name: str, devices: list[tuple[str, str]]) -> None:
    """Allocate claim `name` as another scheduler would: (request, device) pairs of the
    node's GPU and NIC drivers, reserved for a pod numatopo never saw."""
    await hold_devices(cluster, name, "", devices)


async def hold_devices(
    cluster: Cluster, name: str, driver: str, devices: list[tuple[str, str]]
) -> None:
    """`hold`, with devices of `driver` ('': GPUs and dranet's NICs by their names)."""
    results = [
        {
            "request": req,
            "driver": driver or ("dra.net" if device.startswith("pci-") else "gpu.nvidia.com"),
            "pool": NODE,
            "device": device,
        }
        for req, device in devices
    ]
    selector = {"key": "metadata.name", "operator": "In", "values": [NODE]}
    status = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
        },
        "reservedFor": [{"resource": "pods", "name": "elsewhere", "uid": "uid-elsewhere"}],
    }
    async with cluster.api.patch(f"{CLAIMS}/{name}/status", json={"status": status}) as response:
        assert response.status < 300, await response.text()
    obj = stored(cluster, "resourceclaims", name)
    assert obj is not None
    valid(obj)


def free(cluster: Cluster) -> tuple[int, dict[int, list[int]], dict[int, list[str]]]:
    """freeGPUs, and the free GPUs and NICs per NUMA node, of the node's status."""
    status = cluster.numatopology_status(NODE)
    per_numa = status.get("free") or []
    return (
        status.get("freeGPUs", -1),
        {n["numa"]: n.get("gpus", []) for n in per_numa},
        {n["numa"]: n.get("nics", []) for n in per_numa},
    )


async def test_what_other_claims_hold_is_booked_until_deallocated_or_deleted(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Claims numatopo did not decide are booked in the ledger from their allocations (the
    status's free devices, the extender's filter), and freed when the claim is
    deallocated or deleted."""
    await build(cluster)
    await cluster.create(
        CLAIMS,
        claim("theirs", [request("gpu", "gpu.nvidia.com", 2), request("nic", "rdma.dra.net")]),
    )
    running = await start_operator(**FAST)
    await wait(lambda: free(cluster)[0] == 8, what="all 8 GPUs free")

    await hold(cluster, "theirs", [("gpu", "gpu-0"), ("gpu", "gpu-5"), ("nic", "pci-0000-10-1b-0")])
    await wait(lambda: free(cluster)[0] == 6, what="the claim's GPUs booked")
    _, gpus, nics = free(cluster)
    assert gpus == {0: [1, 2, 3], 1: [4, 6, 7]}
    assert nics == {0: ["rdmap32s27"], 1: ["rdmap144s27", "rdmap160s27"]}
    assert cluster.numatopology_status(NODE)["pods"] == 0  # a claim is no pod

    # The extender sees it too: a device-plugin pod asking all 8 GPUs fits nowhere.
    whole = make_pod("whole", node=None, gpus=8, cpu="8", memory="16Gi", policy="best-effort")
    status, result = await running.post("/filter", {"Pod": whole, "NodeNames": [NODE]})
    assert status == 200
    assert result["NodeNames"] == []
    assert NODE in result["FailedNodes"]

    # Deallocated (its pod ended elsewhere): free again.
    await deallocate(cluster, "theirs")
    await wait(lambda: free(cluster)[0] == 8, what="the claim's GPUs freed")
    _, result = await running.post("/filter", {"Pod": whole, "NodeNames": [NODE]})
    assert result["NodeNames"] == [NODE]

    # Allocated again, then deleted: free again.
    await hold(cluster, "theirs", [("gpu", "gpu-7")])
    await wait(lambda: free(cluster)[1][1] == [4, 5, 6], what="gpu-7 booked")
    async with cluster.api.delete(f"{CLAIMS}/theirs") as response:
        assert response.status < 300
    await wait(lambda: free(cluster)[0] == 8, what="the deleted claim's GPU freed")


async def test_a_pod_that_ends_before_its_claim_is_deallocated_frees_nothing_early(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """numatopo's own decision: while the pod lives its assignment books the devices;
    once it is gone its claim, still allocated, keeps them booked until the resourceclaim
    controller deallocates it."""
    await build(cluster)
    await cluster.create(CLAIMS, claim("mine", [request("gpu", "gpu.nvidia.com", 2)]))
    await cluster.create_pod(dra_pod("train", ["mine"]))
    await start_operator(**FAST)
    await wait(lambda: not gated(cluster, "train"), what="train released")
    await wait(lambda: free(cluster)[0] == 6 and cluster.numatopology_status(NODE)["pods"] == 1,
               what="train booked")  # fmt: skip
    await cluster.delete_pod("train")
    await wait(lambda: cluster.numatopology_status(NODE)["pods"] == 0, what="train forgotten")
    assert free(cluster)[0] == 6, "the claim still holds its GPUs"
    await deallocate(cluster, "mine")
    await wait(lambda: free(cluster)[0] == 8, what="freed by the deallocation")


async def test_nrt_counts_what_dra_pods_and_other_claims_hold(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """NodeResourceTopology of a DRA node: its GPUs and NICs are counted under their
    driver and pool (no device plugin advertises them: never under `nvidia.com/gpu` or
    the NICs' RDMA resource); a DRA pod's CPUs and GPUs, and the GPUs a claim numatopo did
    not decide holds, are not available; freed with the claims."""
    register_foreign(cluster.api)
    await build(cluster)
    await cluster.create(CLAIMS, claim("theirs", [request("gpu", "gpu.nvidia.com", 1)]))
    await cluster.create(CLAIMS, claim("pair", [request("gpu", "gpu.nvidia.com", 2)]))
    await start_operator(**FAST, export_nrt=True)
    await wait(lambda: NODE in nrts(cluster), what="NRT written")
    await hold(cluster, "theirs", [("gpu", "gpu-7")])
    await cluster.create_pod(dra_pod("train", ["pair"]))
    await wait(lambda: not gated(cluster, "train"), what="train released")
    claimed = [int(d.split("-")[1]) for d in allocated(cluster, "pair")]
    numa_of = {g.index: g.numa for g in spec().gpus}
    (numa,) = {numa_of[g] for g in claimed}
    cpus = {numa: 48, 1 - numa: 48}
    gpus = {0: 4, 1: 3}
    gpus[numa] -= 2

    def counted() -> bool:
        nrt = nrts(cluster).get(NODE)
        return nrt is not None and all(
            available(nrt, f"node-{n}", "cpu") == cpus[n] - (8 if n == numa else 0)
            and available(nrt, f"node-{n}", GPU_POOL) == gpus[n]
            for n in (0, 1)
        )

    await wait(counted, what="NRT available counts the DRA pod and the other claim")
    nrt = nrts(cluster)[NODE]
    assert nrt_errors(nrt) == []
    names = {r["name"] for zone in nrt["zones"] for r in zone["resources"]}
    assert {n for n in names if "/" in n} == {GPU_POOL, f"dra.net/{NODE}"}, names
    nics = {n.name: n.numa for n in spec().nics}
    for n in (0, 1):
        assert available(nrt, f"node-{n}", f"dra.net/{NODE}") == list(nics.values()).count(n)

    await cluster.delete_pod("train")
    await deallocate(cluster, "pair")
    await deallocate(cluster, "theirs")

    def freed() -> bool:
        nrt = nrts(cluster)[NODE]
        return all(
            available(nrt, f"node-{n}", GPU_POOL) == 4 and available(nrt, f"node-{n}", "cpu") == 48
            for n in (0, 1)
        )

    await wait(freed, what="NRT available once the claims are deallocated")


async def test_nrt_counts_gpus_a_device_class_serves_under_its_extended_resource(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """KEP-5004: a DeviceClass naming `example.com/gpu` (the resource pods ask in their
    containers to get its devices) puts the node's GPUs under that name in the NRT,
    where NodeResourceTopologyMatch compares container requests; what a claim holds is
    not available. The name taken off the class: back under driver and pool."""
    register_foreign(cluster.api)
    await build(cluster)
    named = device_class("a100", GPU_CLASS_SELECTOR, extended="example.com/gpu")
    kubernetes_validate.validate(named, "1.34.0", strict=True)
    await cluster.create("/apis/resource.k8s.io/v1/deviceclasses", named)
    await cluster.create(CLAIMS, claim("theirs", [request("gpu", "a100", 1)]))
    await start_operator(**FAST, export_nrt=True)
    await hold(cluster, "theirs", [("gpu", "gpu-7")])
    seventh = spec().gpus[7].numa
    gpus = {n: sum(g.numa == n for g in spec().gpus) - (n == seventh) for n in (0, 1)}

    def named_gpus(resource: str) -> bool:
        nrt = nrts(cluster).get(NODE)
        try:
            return nrt is not None and all(
                available(nrt, f"node-{n}", resource) == gpus[n] for n in (0, 1)
            )
        except KeyError:
            return False

    await wait(lambda: named_gpus("example.com/gpu"), what="NRT GPUs under example.com/gpu")
    nrt = nrts(cluster)[NODE]
    assert nrt_errors(nrt) == []
    names = {r["name"] for zone in nrt["zones"] for r in zone["resources"]}
    assert {n for n in names if "/" in n} == {"example.com/gpu", f"dra.net/{NODE}"}, names

    async with cluster.api.patch(
        "/apis/resource.k8s.io/v1/deviceclasses/a100",
        json={"spec": {"extendedResourceName": None}},
    ) as response:
        assert response.status < 300, await response.text()
    await wait(lambda: named_gpus(GPU_POOL), what="NRT GPUs under their driver and pool again")


async def test_claims_go_only_to_nodes_the_pods_node_filters_allow(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """kube-scheduler's node filters (taints, nodeSelector) decide which nodes' devices a
    DRA pod's claims may take: the pod is sent to that node by its nodeSelector, so a
    node it may not run on would leave it Pending for good."""
    await build(cluster)
    await build(cluster, "p4d-b", classes_too=False)
    taint = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}
    await cluster.patch_node(NODE, {"spec": {"taints": [taint]}})
    await cluster.patch_node("p4d-b", {"metadata": {"labels": {"pool": "b"}}})
    for name, count in (("first", 2), ("second", 8), ("third", 2)):
        await cluster.create(CLAIMS, claim(name, [request("gpu", "gpu.nvidia.com", count)]))
    await start_operator(**FAST)

    # p4d-a comes first in name order, but its taint is not tolerated.
    await cluster.create_pod(dra_pod("plain", ["first"]))
    await wait(lambda: not gated(cluster, "plain"), what="plain released")
    assert cluster.pods()["plain"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "p4d-b"}
    claim_obj = stored(cluster, "resourceclaims", "first")
    assert claim_obj is not None
    assert {r["pool"] for r in claim_obj["status"]["allocation"]["devices"]["results"]} == {"p4d-b"}

    # Tolerating it, a pod may go there: 8 GPUs, which only p4d-a still has.
    tolerant = dra_pod("tolerant", ["second"], policy="best-effort")
    tolerant["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    await cluster.create_pod(tolerant)
    await wait(lambda: not gated(cluster, "tolerant"), what="tolerant released")
    assert cluster.pods()["tolerant"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": NODE}

    # A nodeSelector no node with devices matches: the pod waits, gated, and says why.
    picky = dra_pod("picky", ["third"])
    picky["spec"]["nodeSelector"] = {"pool": "c"}
    await cluster.create_pod(picky)
    await wait(
        lambda: "DRAUnsatisfiable" in {r for r, _ in cluster.events_for("picky")},
        what="picky waits",
    )
    assert gated(cluster, "picky")
    assert allocated(cluster, "third") == []


async def test_the_extender_judges_a_dra_pod_by_its_claims_devices(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """A DRA pod scheduled with the extender (no gate): the nodes whose devices cannot
    satisfy its claims fail, those without DRA devices cannot take it at all; judged by
    its requests alone (no device-plugin resource) every node with CPUs would pass."""
    await build(cluster)
    await build(cluster, "p4d-b", classes_too=False)
    await cluster.create_numatopology(numatopology("cpu-only", spec()))
    await cluster.create(CLAIMS, claim("theirs", [request("gpu", "gpu.nvidia.com", 6)]))
    await cluster.create(CLAIMS, claim("four", [request("gpu", "gpu.nvidia.com", 4)]))
    regex = 'device.attributes["gpu.nvidia.com"].productName.matches("A100")'
    await cluster.create(CLAIMS, claim("odd", [request("gpu", "gpu.nvidia.com", 1, regex)]))
    running = await start_operator(**FAST)
    await hold(cluster, "theirs", [("gpu", f"gpu-{i}") for i in range(6)])
    await wait(lambda: free(cluster)[0] == 2, what="theirs booked on p4d-a")
    await wait(lambda: {"default/four", "default/odd"} <= set(running.runtime.dra_holds.bodies),
               what="claims watched")  # fmt: skip

    nodes = [NODE, "p4d-b", "cpu-only"]
    pod = dra_pod("train", ["four"], policy="best-effort")
    del pod["spec"]["schedulingGates"]
    status, result = await running.post("/filter", {"Pod": pod, "NodeNames": nodes})
    assert status == 200
    assert result["NodeNames"] == ["p4d-b"]
    assert set(result["FailedNodes"]) == {NODE}
    assert result["FailedAndUnresolvableNodes"] == {"cpu-only": "the node publishes no DRA devices"}
    status, ranked = await running.post("/prioritize", {"Pod": pod, "NodeNames": nodes})
    assert status == 200
    assert {h["Host"]: h["Score"] for h in ranked} == {NODE: 0, "p4d-b": 10, "cpu-only": 0}

    # A claim numatopo cannot judge as the allocator would: judged by its requests.
    odd = dra_pod("odd", ["odd"])
    del odd["spec"]["schedulingGates"]
    _, result = await running.post("/filter", {"Pod": odd, "NodeNames": nodes})
    assert sorted(result["NodeNames"]) == sorted(nodes)


async def test_cpus_published_by_dra_driver_cpu_are_claimed_beside_the_gpus(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Where dra-driver-cpu publishes CPUs (individual mode), a pod's CPU claim is
    allocated like its GPU claim: the CPUs the engine puts next to the GPUs, as
    `cpudevNNN` devices; CPUs another claim holds are not handed out."""
    slices = await build(cluster)
    cpus_slice = cpu_slice(NODE, spec())
    await cluster.create("/apis/resource.k8s.io/v1/resourceslices", cpus_slice)
    cpu_class = device_class("dra.cpu", CPU_CLASS_SELECTOR)
    await cluster.create("/apis/resource.k8s.io/v1/deviceclasses", cpu_class)
    all_classes = {**classes(), "dra.cpu": cpu_class}
    await cluster.create(CLAIMS, claim("theirs", [request("cpus", "dra.cpu", 2)]))
    await cluster.create(CLAIMS, claim("pair", [request("gpu", "gpu.nvidia.com", 2)]))
    await cluster.create(CLAIMS, claim("cores", [request("cpus", "dra.cpu", 8)]))
    await start_operator(**FAST)
    cpu_of = {
        d["name"]: d["attributes"]["dra.cpu/cpuID"]["int"] for d in cpus_slice["spec"]["devices"]
    }
    held = [("cpus", name) for name, cpu in cpu_of.items() if cpu in (0, 48)]
    await hold_devices(cluster, "theirs", "dra.cpu", held)
    await wait(
        lambda: cluster.numatopology_status(NODE).get("freeCPUs") == 94,
        what="the other claim's CPUs booked",
    )

    await cluster.create_pod(dra_pod("train", ["pair", "cores"]))
    await wait(lambda: not gated(cluster, "train"), what="train released")
    cores = stored(cluster, "resourceclaims", "cores")
    assert cores is not None
    valid(cores)
    assert allocation_problems(cores, NODE, [*slices, cpus_slice], all_classes) == []
    claimed = {cpu_of[d] for d in allocated(cluster, "cores")}
    assert len(claimed) == 8
    assert not claimed & {0, 48}
    gpus = {int(d.split("-")[1]) for d in allocated(cluster, "pair")}
    numa_of_gpu = {g.index: g.numa for g in spec().gpus}
    numa_of_cpu = {c.id: c.numa for c in spec().cpus}
    assert {numa_of_cpu[c] for c in claimed} == {numa_of_gpu[g] for g in gpus}
    assignment = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])
    assert set(CPUSet.parse(assignment["containers"]["main"]["cpus"])) == claimed
    dra = cluster.numatopology_status(NODE)["dra"]
    assert f"dra.cpu/{NODE}: 96 CPUs" in dra["summary"]
