"""On a real cluster: install the chart, run the examples, check what numatopo did.

For each example: the pod gets an assignment on the node it was bound to, the state
`Enforced`, the condition `numatopo.io/Aligned=True`, and each container's allowed CPUs
are exactly its assigned cpuset. Examples whose GPUs or CPUs no node has are skipped
with the reason. The admission guard is checked with the test's own credentials.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from numatopo_engine.cpuset import CPUSet

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def _single_pod_workload(path: Path) -> bool:
    """Examples this test runs one pod of: not numatopo's own objects (a NetworkTopology),
    not group members (a group waits for all its members on labelled nodes;
    tests/operator/test_groups_cluster.py places them)."""
    manifest = yaml.safe_load(path.read_text())
    template = manifest.get("spec", {}).get("template", manifest)
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return manifest["kind"] in ("Pod", "Job") and "numatopo.io/group" not in annotations


EXAMPLES = [p for p in sorted((REPO / "examples").glob("*.yaml")) if _single_pod_workload(p)]
ASSIGNMENT = "numatopo.io/assignment"
STATE = "numatopo.io/state"
FINAL_STATES = {"Enforced", "EnforcementFailed", "Unsatisfiable", "Invalid"}
ALIGNED = "numatopo.io/Aligned"
# A small image with `cat` stands in for the examples' multi-gigabyte ones.
STAND_IN_IMAGE = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"


def as_test_pod(manifest: dict[str, Any]) -> dict[str, Any]:
    """The example's pod with each container's image replaced by a sleeping busybox."""
    if manifest["kind"] == "Job":
        template = manifest["spec"]["template"]
        pod = {
            "metadata": {"name": manifest["metadata"]["name"], **template["metadata"]},
            "spec": dict(template["spec"]),
        }
    else:
        pod = manifest
    pod = json.loads(json.dumps(pod))
    pod["spec"]["restartPolicy"] = "Never"
    for container in pod["spec"]["containers"]:
        container["image"] = STAND_IN_IMAGE
        container["command"] = ["sleep", "3600"]
        container.pop("args", None)
        container.pop("ports", None)
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def cluster_capacity(kube: Any) -> tuple[int, int, int]:
    """(most GPUs, most CPUs, most MIG devices) one Numatopology reports."""
    objects = kube.CustomObjectsApi().list_cluster_custom_object(
        "numatopo.io", "v1alpha1", "numatopologies"
    )["items"]
    gpus = max((len(o["spec"].get("gpus") or []) for o in objects), default=0)
    cpus = max((len(o["spec"].get("cpus") or []) for o in objects), default=0)
    mig = max(
        (sum(len(g.get("migDevices") or []) for g in o["spec"].get("gpus") or []) for o in objects),
        default=0,
    )
    return gpus, cpus, mig


def needs(pod: dict[str, Any]) -> tuple[int, int, int]:
    """(GPUs, whole CPUs, MIG devices) the pod's containers ask for (millicores rounded up)."""
    gpus = millicores = mig = 0
    for container in pod["spec"]["containers"]:
        limits = container["resources"].get("limits", {})
        gpus += int(limits.get("nvidia.com/gpu", 0))
        mig += sum(int(v) for k, v in limits.items() if k.startswith("nvidia.com/mig-"))
        cpu = str(limits.get("cpu", "0"))
        millicores += int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
    return gpus, -(-millicores // 1000), mig


def test_every_node_publishes_its_topology(
    kube: Any, release: dict[str, Any], wait: Callable[..., Any]
) -> None:
    """Each node running a node pod has a Numatopology with `Exported=True`."""
    pods = (
        kube.CoreV1Api()
        .list_namespaced_pod(
            release["namespace"], label_selector="app.kubernetes.io/component=node"
        )
        .items
    )
    nodes = {p.spec.node_name for p in pods}
    custom = kube.CustomObjectsApi()

    def exported() -> set[str]:
        items = custom.list_cluster_custom_object("numatopo.io", "v1alpha1", "numatopologies")
        return {
            o["metadata"]["name"]
            for o in items["items"]
            for c in (o.get("status") or {}).get("conditions") or []
            if c["type"] == "Exported" and c["status"] == "True"
        }

    wait("an Exported Numatopology for every node", lambda: nodes <= exported())
    actual = nodes & exported()

    assert nodes == actual


@pytest.mark.parametrize("example", [pytest.param(p, id=p.stem) for p in EXAMPLES])
def test_example_is_assigned_enforced_and_aligned(
    kube: Any, workload_namespace: str, example: Path, wait: Callable[..., Any]
) -> None:
    pod = as_test_pod(yaml.safe_load(example.read_text()))
    gpus, cpus, mig = needs(pod)
    have_gpus, have_cpus, have_mig = cluster_capacity(kube)
    if gpus > have_gpus or cpus > have_cpus or mig > have_mig:
        pytest.skip(
            f"needs {gpus} GPUs, {mig} MIG devices and {cpus} CPUs on one node; the largest "
            f"node has {have_gpus} GPUs, {have_mig} MIG devices and {have_cpus} CPUs"
        )
    core = kube.CoreV1Api()
    name = pod["metadata"]["name"]
    core.create_namespaced_pod(workload_namespace, pod)

    def settled() -> Any:
        """The pod once numatopo is done with it: a final state, and for Enforced the
        condition the agent sets with it."""
        current = core.read_namespaced_pod(name, workload_namespace)
        state = (current.metadata.annotations or {}).get(STATE)
        conditions = {c.type for c in current.status.conditions or []}
        if state in FINAL_STATES and (state != "Enforced" or ALIGNED in conditions):
            return current
        return None

    current = wait(f"pod {name} to be assigned and enforced", settled)
    annotations = current.metadata.annotations
    assignment = json.loads(annotations[ASSIGNMENT])
    allowed = {
        c.name: _allowed_cpus(kube, workload_namespace, name, c.name)
        for c in current.spec.containers
    }
    conditions = {c.type: c.status for c in current.status.conditions}

    assert ("Enforced", "True", current.spec.node_name, allowed) == (
        annotations[STATE],
        conditions[ALIGNED],
        assignment["node"],
        {n: str(CPUSet.parse(c["cpus"])) for n, c in assignment["containers"].items()},
    )


def _allowed_cpus(kube: Any, namespace: str, pod: str, container: str) -> str:
    from kubernetes.stream import stream

    status = stream(
        kube.CoreV1Api().connect_get_namespaced_pod_exec,
        pod,
        namespace,
        container=container,
        command=["grep", "Cpus_allowed_list", "/proc/self/status"],
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
    )
    return str(CPUSet.parse(status.split(":", 1)[1].strip()))


def test_users_cannot_write_assignments(kube: Any, workload_namespace: str) -> None:
    """The admission policy refuses a pod that arrives with an assignment of its own."""
    from kubernetes.client.exceptions import ApiException

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "grabber", "annotations": {ASSIGNMENT: '{"v": 1}'}},
        "spec": {"containers": [{"name": "c", "image": STAND_IN_IMAGE}]},
    }
    with pytest.raises(ApiException) as caught:
        kube.CoreV1Api().create_namespaced_pod(workload_namespace, pod)

    assert (422, True) == (caught.value.status, ASSIGNMENT in str(caught.value.body))
