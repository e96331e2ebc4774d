"""The real operator (kopf over HTTP, kmock's KubernetesEmulator) placing accelerators
that are not whole NVIDIA GPUs: Habana Gaudi2 on a real sysfs tree with grafted Gaudi2
functions (tests/fixtures/sysfs/accelerators), and MIG devices on a DGX A100 whose GPUs
0, 1 and 4 are in MIG mode (tests/fixtures/pods/nodes/dgx-a100-mig.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numatopo_engine import annotations as keys
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.sysfs import read_sysfs
from sysfs_grafting import grafted_tree
from sysfs_trees import extract_shared, shared_trees

MIG_NODE = Path(__file__).resolve().parents[1] / "fixtures" / "pods" / "nodes" / "dgx-a100-mig.json"


@pytest.fixture
def gaudi_spec(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> NumatopologySpec:
    shared = shared_trees(tmp_path_factory)
    root = grafted_tree("gaudi2", lambda tree: extract_shared(tree, shared), tmp_path)
    return read_sysfs(HostRoot(root))


def accelerator_pod(env: Any, name: str, node: str, resource: str, count: int) -> dict[str, Any]:
    pod: dict[str, Any] = env.pod(name, node=node, cpu="2", memory="1Gi")
    for side in ("requests", "limits"):
        pod["spec"]["containers"][0]["resources"][side][resource] = str(count)
    return pod


def assignment(cluster: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(cluster.annotations(name)[keys.ASSIGNMENT])
    return found


def assigned(cluster: Any, name: str) -> bool:
    return cluster.annotations(name).get(keys.STATE) == "Assigned"


async def test_gaudi_pods_are_placed_numa_aligned(env: Any, gaudi_spec: NumatopologySpec) -> None:
    cluster, start_operator, _, _, _, wait = env.parts()
    assert {g.resource for g in gaudi_spec.gpus} == {"habana.ai/gaudi"}
    await cluster.create_numatopology(env.topology_object("gaudi-a", gaudi_spec))
    await start_operator()
    for number in range(5):
        await cluster.create_pod(
            accelerator_pod(env, f"g{number}", "gaudi-a", "habana.ai/gaudi", 1)
        )
    names = [f"g{number}" for number in range(5)]
    for name in names:
        await wait(lambda n=name: cluster.events_for(n), what=f"an Event about {name}")
    numa_of = {g.index: g.numa for g in gaudi_spec.gpus}
    cpus_of = {n.id: n.cpus for n in gaudi_spec.numa_nodes}
    taken: set[int] = set()
    for name in [n for n in names if assigned(cluster, n)]:
        found = assignment(cluster, name)
        container = found["containers"]["main"]
        (gaudi,) = container["gpuIndices"]
        assert [numa_of[gaudi]] == found["numaNodes"]
        assert set(CPUSet.parse(container["cpus"])) <= set(cpus_of[numa_of[gaudi]])
        taken.add(gaudi)
    assert {0, 1, 2, 3} == taken
    # Four Gaudi2 for five pods: one is refused, with the reason in its Event.
    refused = [n for n in names if not assigned(cluster, n)]
    assert 1 == len(refused)
    events = cluster.events_for(refused[0])
    assert ["NumatopoUnsatisfiable"] == [reason for reason, _ in events], events


async def test_mig_pods_get_mig_devices_of_their_numa_node_and_whole_gpus_skip_mig_mode(
    env: Any,
) -> None:
    cluster, start_operator, _, _, _, wait = env.parts()
    spec = Numatopology.model_validate(json.loads(MIG_NODE.read_text())).spec
    await cluster.create_numatopology(env.topology_object("a100-mig", spec))
    await start_operator()
    await cluster.create_pod(accelerator_pod(env, "mig-a", "a100-mig", "nvidia.com/mig-3g.40gb", 2))
    await wait(lambda: assigned(cluster, "mig-a"), what="mig-a Assigned")
    await cluster.create_pod(accelerator_pod(env, "mig-b", "a100-mig", "nvidia.com/mig-3g.40gb", 2))
    await cluster.create_pod(accelerator_pod(env, "whole", "a100-mig", "nvidia.com/gpu", 3))
    await wait(lambda: assigned(cluster, "mig-b"), what="mig-b Assigned")
    await wait(lambda: assigned(cluster, "whole"), what="whole Assigned")

    parent = {m.index: g for g in spec.gpus for m in g.mig_devices or ()}
    held: list[int] = []
    for name in ("mig-a", "mig-b"):
        found = assignment(cluster, name)
        container = found["containers"]["main"]
        assert container.get("gpuIndices", []) == []
        devices = container["migIndices"]
        assert 2 == len(devices)
        assert {parent[d].numa for d in devices} == set(found["numaNodes"])
        uuids = {m.index: m.uuid for g in spec.gpus for m in g.mig_devices or ()}
        assert [uuids[d] for d in devices] == container["mig"]
        held += devices
    assert sorted(held) == [8, 9, 17, 18]  # the 3g.40gb devices of GPUs 0 and 4
    whole = assignment(cluster, "whole")["containers"]["main"]
    assert [5, 6, 7] == whole["gpuIndices"]  # GPU 4 is in MIG mode, never handed out whole
    # The node's status lists free devices: whole GPUs and MIG devices, never GPU 0/1/4.
    expected_free = [2, 3, *range(10, 17)]

    def free_listed() -> bool:
        status = cluster.numatopology_status("a100-mig")
        free = {entry["numa"]: entry.get("gpus", []) for entry in status.get("free", [])}
        return status.get("freeGPUs") == 9 and free == {0: expected_free, 1: []}

    await wait(free_listed, what="status.free listing the free GPUs and MIG devices")
    events = dict(cluster.events_for("mig-a"))
    assert (
        "MIG devices 8,9" in events["NumatopoAssigned"]
        or "MIG devices 17,18" in events["NumatopoAssigned"]
    )
