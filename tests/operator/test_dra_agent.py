"""GPUs on DRA clusters with the node agent, end to end: the real operator (kopf over
HTTP, kmock's emulator) allocates a pod's ResourceClaims on an AWS p4d node, the real
agent loop pins its CPUs next to the claimed GPUs (cgroup files written), and the
kubelet harness serves PodResources as a DRA node's kubelet does: no device plugin
lists the GPUs (they are DRA devices), so the agent reports them all as not allocatable
by the kubelet's device plugins.

Mocked: only the node's cgroup tree (plain files shaped like cgroup v1; the real cgroup
writes are covered in tests/exporter/agent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dra_objects import claim, gpu_slice, nic_slice, request
from kubelet_harness import Harness
from node_agent import cgroup_tree, running_agent, runs_and_aligns
from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet

from .conftest import Cluster, numatopology
from .test_dra_cluster import CLAIMS, FAST, NODE, allocated, build, dra_pod, gated, spec

CID = "d4a0d4a0d4a0d4a0"


@pytest.mark.timeout(90)
async def test_the_agent_pins_cpus_next_to_the_claimed_gpus(
    cluster: Cluster, start_operator: Any, wait: Any, tmp_path: Path
) -> None:
    await build(cluster)
    await start_operator(**FAST)
    await wait(lambda: "dra" in cluster.numatopology_status(NODE), what="status.dra written")
    dra = cluster.numatopology_status(NODE)["dra"]
    assert dra["summary"] == "dra.net/p4d-a: 4 NICs; gpu.nvidia.com/p4d-a: 8 GPUs"
    assert sorted(d["gpu"] for d in dra["devices"] if "gpu" in d) == list(range(8))

    async with (
        Harness() as kubelet,
        running_agent(str(cluster.api.url), NODE, tmp_path, kubelet.pod_resources_socket),
    ):
        # No device plugin lists the GPUs: the agent says so, and the node's mode.
        await wait(
            lambda: cluster.numatopology_status(NODE).get("gpuMode") == "Allocated",
            what="mode Allocated",
        )
        await wait(
            lambda: len(
                (cluster.numatopology_status(NODE).get("unhealthy") or {}).get("gpus", [])
            ) == 8,
            what="the agent's unhealthy report",
        )  # fmt: skip

        # ... which does not keep the operator from allocating the DRA GPUs.
        await cluster.create(CLAIMS, claim("pair", [request("gpu", "gpu.nvidia.com", 2)]))
        body = dra_pod("train", ["pair"])
        uid = body["metadata"]["uid"]
        await cluster.create_pod(body)
        await wait(lambda: not gated(cluster, "train"), what="train released")
        first = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])

        # kube-scheduler binds it; the kubelet runs it (its cgroup, its container).
        cgroup_tree(tmp_path, uid, CID, cpus="0-95")
        await cluster.patch_pod("train", {"spec": {"nodeName": NODE}})
        await runs_and_aligns(cluster, "train", CID, wait)

    final = json.loads(cluster.annotations("train")[keys.ASSIGNMENT])
    assert final["seq"] == first["seq"], "never realigned: the claim is the guarantee"
    container = final["containers"]["main"]
    claimed = {int(d.split("-")[1]) for d in allocated(cluster, "pair")}
    assert set(container["gpuIndices"]) == claimed
    numa_of = {g.index: g.numa for g in spec().gpus}
    gpu_numa = {numa_of[g] for g in claimed}
    assert len(gpu_numa) == 1
    cpus = CPUSet.parse(container["cpus"])
    assert len(cpus) == 8
    assert {c.numa for c in spec().cpus if c.id in cpus} == gpu_numa
    assert set(CPUSet.parse(container["mems"])) == gpu_numa
    written = (tmp_path / "kubepods" / f"pod{uid}" / CID / "cpuset.cpus").read_text().strip()
    assert CPUSet.parse(written) == cpus
    mems = (tmp_path / "kubepods" / f"pod{uid}" / CID / "cpuset.mems").read_text().strip()
    assert set(CPUSet.parse(mems)) == gpu_numa
    reasons = {reason for reason, _ in cluster.events_for("train")}
    assert not reasons & {"GPUMismatch", "GPUsUnverified", "NumatopoRealigned"}, reasons
    assert keys.OBSERVED not in cluster.annotations("train")


@pytest.mark.timeout(60)
async def test_the_agent_learns_a_new_status_dra_within_seconds(
    cluster: Cluster, start_operator: Any, wait: Any, tmp_path: Path
) -> None:
    """The agent runs on a node whose GPUs no DRA driver publishes yet (mode Followed);
    then the driver's ResourceSlices appear and the operator writes `status.dra`. The
    agent follows its Numatopology: the node's mode is Allocated within seconds, not at
    its periodic re-read (300 s) or a change of the kubelet's allocatable devices (none
    here)."""
    await cluster.create_node(NODE)
    await cluster.create_numatopology(numatopology(NODE, spec()))
    await start_operator(**FAST)

    async with (
        Harness() as kubelet,
        running_agent(str(cluster.api.url), NODE, tmp_path, kubelet.pod_resources_socket) as agent,
    ):
        assert agent.devices.spec_refresh_seconds == 300.0
        await wait(
            lambda: cluster.numatopology_status(NODE).get("gpuMode") == "Followed",
            what="mode Followed",
        )
        assert "dra" not in cluster.numatopology_status(NODE)
        for body in (gpu_slice(NODE, spec()), nic_slice(NODE, spec())):
            await cluster.create("/apis/resource.k8s.io/v1/resourceslices", body)
        await wait(lambda: "dra" in cluster.numatopology_status(NODE), what="status.dra")
        await wait(
            lambda: cluster.numatopology_status(NODE).get("gpuMode") == "Allocated",
            what="mode Allocated",
            timeout=5,
        )
