"""KEP-5004's migration: `nvidia.com/gpu` served by the device plugin on some nodes and
by a DRA driver on others, end to end with the real operator over HTTP against kmock's
emulator. DeviceClass `nvidia` names `nvidia.com/gpu`; node p4d-a publishes its GPUs
and NICs in ResourceSlices and its Node's allocatable has no `nvidia.com/gpu`; node
`plugin-node` (the same p4d) has it in its allocatable (the device plugin runs there)
and publishes only its NICs through DRA (dranet).

kube-scheduler's rule, per node and per resource (DynamicResources'
`filterExtendedResources`): a name the node's allocatable lists is the device plugin's
there, the same name included; any other a DeviceClass serves is DRA's, through the
claim it creates in PreBind and maps per container in `status.extendedResourceClaimStatus`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dra_objects import GPU_CLASS_SELECTOR, claim, device_class, gpu_slice, nic_slice, request
from foreign_schemas import nrt_errors
from kubelet_harness import Harness
from node_agent import cgroup_tree, running_agent, runs_and_aligns
from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet

from .conftest import Cluster, numatopology
from .test_dra_bind import NUMA1_GPUS, asking, bound_beside_numa1, prebind_extended
from .test_dra_cluster import CLAIMS, FAST, NODE, build, free, hold, spec
from .test_exports_cluster import nrts, register_foreign

GPU = "nvidia.com/gpu"
PLUGIN_NODE = "plugin-node"
NOT_FOLLOWED = "DRAClaimsNotFollowed"
LOW_GPUS = GPU_CLASS_SELECTOR + ' && device.attributes["gpu.nvidia.com"].index < 4'


async def mixed(cluster: Cluster, selector: str = GPU_CLASS_SELECTOR) -> None:
    """The two nodes, and class `nvidia` (its devices: `selector`) serving
    `nvidia.com/gpu` where no plugin does."""
    await build(cluster)
    await cluster.create_node(PLUGIN_NODE)
    await cluster.patch_node(PLUGIN_NODE, {"status": {"allocatable": {GPU: "8", "cpu": "96"}}})
    await cluster.create_numatopology(numatopology(PLUGIN_NODE, spec()))
    await cluster.create("/apis/resource.k8s.io/v1/resourceslices", nic_slice(PLUGIN_NODE, spec()))
    nvidia = device_class("nvidia", selector, extended=GPU)
    await cluster.create("/apis/resource.k8s.io/v1/deviceclasses", nvidia)


def reasons(cluster: Cluster, pod: str) -> set[str]:
    return {r for r, _ in cluster.events_for(pod)}


async def test_nrt_counts_nvidia_gpu_once_per_node_from_its_source(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Each node's NRT has `nvidia.com/gpu` once per zone, 4 + 4: the DRA node's GPUs
    under the name the class serves them as (not also under the spec's, nor under driver
    and pool), the plugin node's as the device plugin advertises them."""
    register_foreign(cluster.api)
    await mixed(cluster)
    await start_operator(**FAST, export_nrt=True)
    await wait(lambda: {NODE, PLUGIN_NODE} <= set(nrts(cluster)), what="both NRTs written")

    for node in (NODE, PLUGIN_NODE):
        nrt = nrts(cluster)[node]
        assert nrt_errors(nrt) == []
        counted = []
        for zone in nrt["zones"]:
            names = [r["name"] for r in zone["resources"]]
            assert len(names) == len(set(names)), (node, names)
            counted += [int(r["capacity"]) for r in zone["resources"] if r["name"] == GPU]
        assert counted == [4, 4], (node, counted)
        names = {r["name"] for zone in nrt["zones"] for r in zone["resources"]}
        assert f"gpu.nvidia.com/{node}" not in names
        assert f"dra.net/{node}" in names  # the NICs, DRA's on both


async def test_bind_on_the_dra_node_follows_the_claim_for_nvidia_gpu(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """The pod asks `nvidia.com/gpu: 2`; on p4d-a kube-scheduler's claim for it holds GPUs
    4 and 5 (NUMA 1): the assignment names them, CPUs and memory on NUMA 1, booked once,
    no Event. Read as device-plugin GPUs beside the claim, the pod was decided from its
    requests: two more GPUs booked for it, its CPUs away from the claimed GPUs."""
    await mixed(cluster)
    await cluster.create_pod(asking("train", GPU, 2))
    bindings = cluster.emulate_binding()
    running = await start_operator(**FAST)
    await prebind_extended(cluster, "train", "nvidia", GPU, NUMA1_GPUS)
    await wait(lambda: free(cluster)[0] == 6, what="the claim's GPUs booked as a hold")

    await bound_beside_numa1(cluster, running, "train", bindings)
    await wait(lambda: "NumatopoAssigned" in reasons(cluster, "train"), what="assigned Event")
    assert free(cluster)[0] == 6
    assert NOT_FOLLOWED not in reasons(cluster, "train"), cluster.events_for("train")


async def test_bind_on_the_plugin_node_decides_from_requests_without_an_event(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """The same pod bound to the plugin node (which publishes DRA NICs, so DRA devices,
    but has `nvidia.com/gpu` in its allocatable): kube-scheduler made no claim; numatopo
    decides its 2 GPUs from its requests, as for any device-plugin pod, and says
    nothing of claims."""
    await mixed(cluster)
    await cluster.create_pod(asking("train", GPU, 2))
    bindings = cluster.emulate_binding()
    running = await start_operator(**FAST)
    await wait(lambda: PLUGIN_NODE in set(running.runtime.ledger.nodes()), what="node known")
    await wait(
        lambda: running.runtime.dra_holds.joined(
            PLUGIN_NODE, running.runtime.ledger.topology(PLUGIN_NODE)
        ) is not None,
        what="its NICs joined",
    )  # fmt: skip

    status, result = await running.post("/bind", cluster.binding_args("train", PLUGIN_NODE))

    assert (status, result) == (200, {"Error": ""})
    assert [b["target"]["name"] for b in bindings] == [PLUGIN_NODE]
    main = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])["containers"]["main"]
    assert len(main["gpuIndices"]) == 2
    await wait(lambda: "NumatopoAssigned" in reasons(cluster, "train"), what="assigned Event")
    assert NOT_FOLLOWED not in reasons(cluster, "train"), cluster.events_for("train")


async def test_the_filter_counts_the_dra_gpus_the_class_serves_on_the_dra_node(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Class `nvidia` serves `nvidia.com/gpu` from p4d-a's GPUs 0-3 only; another claim
    holds GPUs 0 and 1. A pod asking 4 cannot get them there through kube-scheduler's
    claim (2 left), though 6 of the node's GPUs are free: the filter fails p4d-a and
    passes the plugin node, judged as before. Asking 2, both pass."""
    await mixed(cluster, LOW_GPUS)
    await cluster.create(CLAIMS, claim("theirs", [request("gpu", "gpu.nvidia.com", 2)]))
    running = await start_operator(**FAST)
    await hold(cluster, "theirs", [("gpu", "gpu-0"), ("gpu", "gpu-1")])
    await wait(lambda: free(cluster)[0] == 6, what="theirs booked on p4d-a")
    await wait(lambda: PLUGIN_NODE in set(running.runtime.ledger.nodes()), what="node known")
    await wait(lambda: "nvidia" in running.runtime.dra_holds.classes, what="class watched")
    nodes = [NODE, PLUGIN_NODE]

    await cluster.create_pod(asking("four", GPU, 4))
    status, result = await running.post("/filter", {"Pod": cluster.pod("four"), "NodeNames": nodes})

    assert status == 200
    assert result["NodeNames"] == [PLUGIN_NODE]
    assert set(result["FailedNodes"]) == {NODE}

    # The same 4 asked by an init container (its GPUs come from the same claim): narrowed too.
    setup = asking("setup-four", GPU, 4)
    main = setup["spec"]["containers"][0]
    setup["spec"]["initContainers"] = [{**main, "name": "setup"}]
    main["resources"] = {k: {r: v for r, v in amounts.items() if r != GPU}
                         for k, amounts in main["resources"].items()}  # fmt: skip
    await cluster.create_pod(setup)
    body = {"Pod": cluster.pod("setup-four"), "NodeNames": nodes}
    status, result = await running.post("/filter", body)
    assert status == 200
    assert result["NodeNames"] == [PLUGIN_NODE]

    await cluster.create_pod(asking("two", GPU, 2))
    status, result = await running.post("/filter", {"Pod": cluster.pod("two"), "NodeNames": nodes})
    assert status == 200
    assert sorted(result["NodeNames"]) == sorted(nodes)


@pytest.mark.timeout(90)
async def test_the_agent_pins_a_pod_whose_nvidia_gpus_dra_serves_without_following_it(
    cluster: Cluster, start_operator: Any, wait: Any, tmp_path: Path
) -> None:
    """The real agent on the DRA node (its kubelet's device plugins list no GPU) with the
    pod `/bind` placed next to the claim's GPUs 4 and 5: its GPUs come from the claim,
    so the agent pins its CPUs and reports Aligned, never waiting for device-plugin GPUs
    (read as the device plugin's, the pod stayed unverified: no plugin lists them)."""
    cid = "e5b1e5b1e5b1e5b1"
    await mixed(cluster)
    await cluster.create_pod(asking("train", GPU, 2))
    uid = cluster.pod("train")["metadata"]["uid"]
    cluster.emulate_binding()
    running = await start_operator(**FAST)
    await prebind_extended(cluster, "train", "nvidia", GPU, NUMA1_GPUS)
    await wait(lambda: free(cluster)[0] == 6, what="the claim's GPUs booked as a hold")
    status, result = await running.post("/bind", cluster.binding_args("train", NODE))
    assert (status, result) == (200, {"Error": ""})
    first = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])

    async with (
        Harness() as kubelet,
        running_agent(str(cluster.api.url), NODE, tmp_path, kubelet.pod_resources_socket),
    ):
        cgroup_tree(tmp_path, uid, cid, cpus="0-95")
        await runs_and_aligns(cluster, "train", cid, wait)

    final = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])
    assert final["seq"] == first["seq"], "never realigned: the claim is the guarantee"
    assert sorted(final["containers"]["main"]["gpuIndices"]) == NUMA1_GPUS
    written = (tmp_path / "kubepods" / f"pod{uid}" / cid / "cpuset.cpus").read_text().strip()
    assert CPUSet.parse(written) == CPUSet.parse(final["containers"]["main"]["cpus"])
    said = reasons(cluster, "train")
    assert not said & {"GPUMismatch", "GPUsUnverified", "NumatopoRealigned", NOT_FOLLOWED}, said
    assert keys.OBSERVED not in cluster.annotations("train")


async def test_gpus_the_driver_does_not_publish_count_under_no_name_on_the_dra_node(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """p4d-a's driver publishes GPUs 0-5, not 6 and 7 (NUMA 1), all served as
    `nvidia.com/gpu` by class `nvidia`: its NRT counts the name 4 + 2, not 4 + 4 (the
    unpublished two left under the spec's name, the same one, promised GPUs no pod asking
    it gets there), and the filter passes the node for 6 GPUs, fails it for 7
    (best-effort: the GPUs span both NUMA nodes)."""
    register_foreign(cluster.api)
    await cluster.create_node(NODE)
    await cluster.create_numatopology(numatopology(NODE, spec()))
    published = gpu_slice(NODE, spec())
    published["spec"]["devices"] = published["spec"]["devices"][:6]
    for body in (published, nic_slice(NODE, spec())):
        await cluster.create("/apis/resource.k8s.io/v1/resourceslices", body)
    await cluster.create(
        "/apis/resource.k8s.io/v1/deviceclasses",
        device_class("nvidia", GPU_CLASS_SELECTOR, extended=GPU),
    )
    running = await start_operator(**FAST, export_nrt=True)
    await wait(lambda: NODE in nrts(cluster), what="the NRT written")

    def counted() -> list[int]:
        zones = nrts(cluster)[NODE]["zones"]
        return [int(r["capacity"]) for z in zones for r in z["resources"] if r["name"] == GPU]

    await wait(lambda: counted() == [4, 2], what="nvidia.com/gpu counted 4 + 2")
    assert nrt_errors(nrts(cluster)[NODE]) == []
    await wait(lambda: "nvidia" in running.runtime.dra_holds.classes, what="class watched")
    for asked, passes in ((6, True), (7, False)):
        pod = asking(f"p{asked}", GPU, asked)
        pod["metadata"]["annotations"][keys.POLICY] = "best-effort"
        await cluster.create_pod(pod)
        status, result = await running.post(
            "/filter", {"Pod": cluster.pod(f"p{asked}"), "NodeNames": [NODE]}
        )
        assert status == 200
        assert (result["NodeNames"] == [NODE]) is passes, (asked, result)


HIGH_GPUS = GPU_CLASS_SELECTOR + ' && device.attributes["gpu.nvidia.com"].index >= 6'


def gates(cluster: Cluster, name: str) -> list[str]:
    return [g["name"] for g in cluster.pod(name)["spec"].get("schedulingGates") or []]


async def member(cluster: Cluster, name: str, size: int, gpus: int = 2) -> None:
    """A group member asking `gpus` of `nvidia.com/gpu` (no claim of its own)."""
    pod = asking(name, GPU, gpus)
    pod["metadata"].setdefault("annotations", {}).update(
        {keys.GROUP: "g", keys.GROUP_SIZE: str(size), keys.POLICY: "best-effort"}
    )
    pod["spec"]["schedulingGates"] = [{"name": keys.GROUP}]
    await cluster.create_pod(pod)


def planned_gpus(cluster: Cluster, name: str) -> list[int]:
    assignment = json.loads(cluster.annotations(name)[keys.ASSIGNMENT])
    return sorted(assignment["containers"]["main"]["gpuIndices"])


async def test_a_group_plan_on_the_dra_node_names_only_gpus_the_class_serves(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """Class `nvidia` serves `nvidia.com/gpu` from p4d-a's GPUs 6 and 7 only (the only
    node): a one-member group asking 2 is planned onto exactly those, the GPUs
    kube-scheduler's claim can get there (planned by its request alone, it took two of
    the eight free)."""
    await build(cluster)
    await cluster.create(
        "/apis/resource.k8s.io/v1/deviceclasses", device_class("nvidia", HIGH_GPUS, extended=GPU)
    )
    await member(cluster, "m0", 1)
    await start_operator(**FAST)

    await wait(lambda: not gates(cluster, "m0"), what="m0 released")
    assert cluster.pod("m0")["spec"]["nodeSelector"] == {"kubernetes.io/hostname": NODE}
    assert planned_gpus(cluster, "m0") == [6, 7]


async def test_a_group_waits_where_the_class_serves_fewer_gpus_than_its_members_ask(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """The same class (GPUs 6 and 7): two members asking 2 each do not both fit on p4d-a
    through kube-scheduler's claims, though its eight GPUs are free; the group waits,
    gated, and says so. Planned by their requests, both went there and one member's
    claim could never be allocated."""
    await build(cluster)
    await cluster.create(
        "/apis/resource.k8s.io/v1/deviceclasses", device_class("nvidia", HIGH_GPUS, extended=GPU)
    )
    for rank in range(2):
        await member(cluster, f"m{rank}", 2)
    await start_operator(**FAST)

    unsatisfiable = "GroupUnsatisfiable"
    await wait(lambda: unsatisfiable in reasons(cluster, "m0"), what="the group waits")
    assert gates(cluster, "m0") == gates(cluster, "m1") == [keys.GROUP]
    assert keys.ASSIGNMENT not in cluster.annotations("m0")


async def test_a_member_asking_nvidia_gpu_follows_kube_schedulers_claim_at_bind(
    cluster: Cluster, start_operator: Any, wait: Any
) -> None:
    """The group planned m0 (2 `nvidia.com/gpu`, class `nvidia` serving all eight GPUs)
    away from GPUs 4 and 5; kube-scheduler's claim for its extended resource then got
    those (NUMA 1). Its bind replaces the group's assignment by one naming them, CPUs and
    memory on NUMA 1, under the same placement record. Kept as planned, the pod's CPUs
    sat away from the GPUs it holds."""
    await mixed(cluster)
    await cluster.patch_node(PLUGIN_NODE, {"spec": {"unschedulable": True}})
    await member(cluster, "m0", 1)
    bindings = cluster.emulate_binding()
    running = await start_operator(**FAST)
    await wait(lambda: not gates(cluster, "m0"), what="m0 released")
    assert cluster.pod("m0")["spec"]["nodeSelector"] == {"kubernetes.io/hostname": NODE}
    planned = planned_gpus(cluster, "m0")
    assert len(planned) == 2
    assert not set(planned) & set(NUMA1_GPUS), planned
    placement = cluster.annotations("m0")[keys.GROUP_PLACEMENT]
    await prebind_extended(cluster, "m0", "nvidia", GPU, NUMA1_GPUS)
    await wait(lambda: free(cluster)[0] == 4, what="the claim's GPUs booked as a hold")

    await bound_beside_numa1(cluster, running, "m0", bindings)
    assert cluster.annotations("m0")[keys.GROUP_PLACEMENT] == placement
    assert NOT_FOLLOWED not in reasons(cluster, "m0"), cluster.events_for("m0")
    await wait(lambda: free(cluster)[0] == 6, what="booked once, the plan's GPUs free again")
