"""Follow with MIG devices: the agent compares the MIG UUIDs a container holds with its
assignment's `mig` list, the operator maps held MIG UUIDs back to device indices and
re-decides around them (the DGX A100 MIG node of tests/fixtures/pods/nodes)."""

from __future__ import annotations

import json
from pathlib import Path

from numatopo_engine import DEFAULT_RESOURCES, NodeState, allocate, request_from_pod
from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.device_ids import gpu_indices
from numatopo_engine.model import Numatopology
from numatopo_exporter.agent.follow import gpu_words, observe

NODE = Path(__file__).resolve().parents[2] / "fixtures" / "pods" / "nodes" / "dgx-a100-mig.json"
SPEC = Numatopology.model_validate(json.loads(NODE.read_text())).spec
UUID = {m.index: m.uuid for g in SPEC.gpus for m in g.mig_devices or ()}
RESOURCE = "nvidia.com/mig-3g.40gb"


def assignment(*mig: int) -> Assignment:
    container = ContainerAssignment(mig=[UUID[i] for i in mig], mig_indices=list(mig))
    return Assignment(node="a100", containers={"main": container})


def test_held_mig_devices_that_are_the_assigned_ones_match() -> None:
    held = {"main": {RESOURCE: [UUID[9].lower(), UUID[8]]}}
    seen = observe(assignment(8, 9), held, containers=["main"], is_gpu=DEFAULT_RESOURCES.is_gpu)
    assert seen is not None
    assert [] == seen.mismatched


def test_other_mig_devices_are_a_mismatch_named_by_uuid() -> None:
    given = assignment(8, 9)
    held = {"main": {RESOURCE: [UUID[17], UUID[18]]}}
    seen = observe(given, held, containers=["main"], is_gpu=DEFAULT_RESOURCES.is_gpu)
    assert seen is not None
    assert ["main"] == seen.mismatched
    words = gpu_words(seen, given, DEFAULT_RESOURCES.is_gpu)
    assert f"holds GPUs ['{UUID[17]}', '{UUID[18]}'] but was assigned ['{UUID[8]}'" in words


def test_a_container_assigned_mig_devices_holding_none_yet_is_not_observed() -> None:
    assert (
        observe(assignment(8), {"main": {}}, containers=["main"], is_gpu=DEFAULT_RESOURCES.is_gpu)
        is None
    )


def test_held_mig_uuids_map_to_device_indices_and_realign_around_them() -> None:
    assert [17, 18] == gpu_indices([UUID[17], UUID[18]], SPEC.gpus)
    assert gpu_indices(["MIG-not-on-this-node"], SPEC.gpus) is None
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml",
                     "annotations": {"numatopo.io/policy": "single-numa-node"}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {
            "cpu": "2", "memory": "1Gi", RESOURCE: "2"}}}]},
    }  # fmt: skip
    decision = allocate(
        SPEC, NodeState(SPEC), request_from_pod(pod), "a100", pinned={"main": [17, 18]}
    )
    container = decision.assignment.containers["main"]
    assert [17, 18] == container.mig_indices
    assert [1] == decision.assignment.numa_nodes  # GPU 4's NUMA node
