"""The agent against the API emulator, writing real cgroup v1 cpusets (or file trees)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock
import pydantic
import pytest

import signing_keys
from metric_samples import sample
from numatopo_exporter.agent import watch
from numatopo_exporter.agent.feedback import ALIGNED
from numatopo_exporter.agent.pod_view import PodView
from numatopo_kube.backoff import Backoff

from ..conftest import NodeClient, pod_path
from ..daemon.conftest import NODE
from .conftest import CgroupTree, events_posted, make_agent

PODS = "v1/pods"
UID_A = "aaaaaaaa-0000-4000-8000-000000000001"
UID_B = "bbbbbbbb-0000-4000-8000-000000000002"
UID_C = "cccccccc-0000-4000-8000-000000000003"
CID_A, CID_A2, CID_B = "a0a0a0a0a0a0", "a2a2a2a2a2a2", "b0b0b0b0b0b0"


def assignment(cpus: str) -> str:
    return json.dumps({"v": 1, "node": NODE, "containers": {"main": {"cpus": cpus, "mems": "0"}}})


def pod(
    name: str,
    uid: str,
    *,
    cid: str | None,
    annotation: str | None,
    created: str,
    signed: bool = True,
) -> dict[str, Any]:
    annotations = {} if annotation is None else {"numatopo.io/assignment": annotation}
    statuses = (
        []
        if cid is None
        else [{"name": "main", "containerID": f"containerd://{cid}", "state": {"running": {}}}]
    )
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "annotations": annotations,
            "creationTimestamp": created,
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
        "status": {"phase": "Running", "qosClass": "Burstable", "containerStatuses": statuses},
    }
    if annotation is not None and signed:
        # Signed for this pod as the operator writes it, where it is an assignment at all.
        with contextlib.suppress(pydantic.ValidationError):
            annotations["numatopo.io/assignment"] = signing_keys.signed_annotation(body, annotation)
    return body


async def wait_for(predicate: Callable[[], bool], what: str, *, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Node:
    """One node: its cgroups (real or files), the emulated API, and a running agent."""

    def __init__(
        self, tree: CgroupTree, cluster: kmock.KubernetesEmulator, client: NodeClient
    ) -> None:
        self.tree, self.cluster, self.client = tree, cluster, client
        self.online = (tree.root / "cpuset.cpus").read_text().strip()
        self.agent = make_agent(client, tree, resync_seconds=0.1, backoff=Backoff(0.01, 0.05))
        self.pids: dict[str, int] = {}

    def container(self, uid: str, cid: str) -> str:
        relative = f"kubepods/burstable/pod{uid}/{cid}"
        self.tree.make(relative)
        if self.tree.real:
            self.pids[cid] = self.tree.spawn_in(relative)
        return relative

    def cpus(self, relative: str) -> str:
        return (self.tree.root / relative / "cpuset.cpus").read_text().strip()

    def pod(self, name: str) -> dict[str, Any]:
        return dict(self.cluster.objects[PODS, "default", name].raw)

    def state(self, name: str) -> str | None:
        return self.pod(name)["metadata"].get("annotations", {}).get("numatopo.io/state")

    def aligned(self, name: str) -> str | None:
        for condition in self.pod(name).get("status", {}).get("conditions", []):
            if condition["type"] == ALIGNED:
                return str(condition["status"])
        return None

    def events(self) -> list[tuple[str, str]]:
        found = []
        for key in list(self.cluster.objects):
            body = self.cluster.objects[key].raw
            if body.get("kind") == "Event":
                found.append((body["involvedObject"]["name"], body["reason"]))
        return sorted(found)

    async def create(self, body: dict[str, Any]) -> None:
        await self.client.create("/api/v1/namespaces/default/pods", body)


@pytest.fixture
async def node(
    cgroup_tree: CgroupTree, cluster: kmock.KubernetesEmulator, client: NodeClient
) -> AsyncIterator[Node]:
    """A node whose pod `a` holds CPU 1 exclusively while pod `b` runs in the shared pool."""
    the_node = Node(cgroup_tree, cluster, client)
    the_node.container(UID_A, CID_A)
    the_node.container(UID_B, CID_B)
    await the_node.create(
        pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="2024-01-01T00:00:00Z")
    )
    await the_node.create(
        pod("b", UID_B, cid=CID_B, annotation=None, created="2024-01-01T00:00:01Z")
    )
    task = asyncio.create_task(the_node.agent.run())
    try:
        await wait_for(lambda: the_node.state("a") == "Enforced", "pod a enforced")
        yield the_node
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def shared(online: str) -> str:
    return "0" if online == "0-1" else "0,2-3"


async def test_assigned_pod_is_pinned_and_reported(node: Node) -> None:
    a, b = f"kubepods/burstable/pod{UID_A}/{CID_A}", f"kubepods/burstable/pod{UID_B}/{CID_B}"
    # Posted beside the pass: the state can come out before the Event.
    await wait_for(lambda: ("a", "Enforced") in node.events(), "pod a's Event posted")

    assert ("1", shared(node.online)) == (node.cpus(a), node.cpus(b))
    assert ("Enforced", "True") == (node.state("a"), node.aligned("a"))
    assert ("a", "Enforced") in node.events()
    assert 1 == sample(node.agent.metrics, "numatopo_agent_enforcements_total")
    if node.tree.real:
        assert {1} == os.sched_getaffinity(node.pids[CID_A])
        assert 1 not in os.sched_getaffinity(node.pids[CID_B])


async def test_container_restart_is_re_applied(node: Node) -> None:
    """The kubelet restarts the container: a new id, a new cgroup with the pod's CPUs."""
    fresh = node.container(UID_A, CID_A2)
    status = [{"name": "main", "containerID": f"containerd://{CID_A2}", "state": {"running": {}}}]

    await node.client.patch(pod_path("default", "a"), {"status": {"containerStatuses": status}})
    await wait_for(lambda: ("a", "Reenforced") in node.events(), "the restart reported")

    assert "1" == node.cpus(fresh)


async def test_drift_is_corrected(node: Node) -> None:
    a = f"kubepods/burstable/pod{UID_A}/{CID_A}"

    (node.tree.root / a / "cpuset.cpus").write_text(node.online)
    await wait_for(lambda: ("a", "DriftCorrected") in node.events(), "the drift reported")

    assert "1" == node.cpus(a)
    assert 1 <= sample(node.agent.metrics, "numatopo_agent_drift_corrections_total")


async def test_deleted_pod_gives_its_cpus_back(node: Node) -> None:
    b = f"kubepods/burstable/pod{UID_B}/{CID_B}"

    await node.client.request("DELETE", pod_path("default", "a"))
    await wait_for(lambda: node.cpus(b) == node.online, "the shared pool widened")

    if node.tree.real:
        assert 1 in os.sched_getaffinity(node.pids[CID_B])


async def test_a_pod_watch_that_fails_is_run_again(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event whose handling raises what nobody expected ends the pod watch: it is run
    again (a list), counted, and the pod's deletion still gives its CPUs back. (The
    watch used to end alone, the passes going on with the pods it last saw.)"""
    b = f"kubepods/burstable/pod{UID_B}/{CID_B}"
    failed: list[str] = []
    take = watch.take_event

    def take_event(records: Any, event_type: str, body: dict[str, Any]) -> bool:
        if not failed:
            failed.append(event_type)
            raise RuntimeError("injected: an event nobody foresaw")
        return take(records, event_type, body)

    monkeypatch.setattr(watch, "take_event", take_event)

    await node.client.request("DELETE", pod_path("default", "a"))
    await wait_for(lambda: node.cpus(b) == node.online, "the shared pool widened")

    assert failed
    labels = {"task": "pod watch"}
    assert 1 == sample(node.agent.metrics, "numatopo_agent_task_restarts_total", labels)


async def test_overlapping_assignment_is_refused(node: Node) -> None:
    """A later pod claiming pod a's CPU gets an Event and EnforcementFailed; a keeps it."""
    node.container(UID_C, "c0c0c0c0c0c0")
    late = pod(
        "c", UID_C, cid="c0c0c0c0c0c0", annotation=assignment("1"), created="2024-01-02T00:00:00Z"
    )

    await node.create(late)
    await wait_for(lambda: node.state("c") == "EnforcementFailed", "pod c refused")
    await wait_for(lambda: ("c", "AssignmentOverlaps") in node.events(), "pod c's Event posted")

    assert ("c", "AssignmentOverlaps") in node.events()
    assert "False" == node.aligned("c")
    assert "1" == node.cpus(f"kubepods/burstable/pod{UID_A}/{CID_A}")


async def test_static_kubelet_is_left_alone(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    state = file_cgroups.root / "cpu_manager_state"
    state.write_text('{"policyName": "static", "defaultCpuSet": "0-3"}')
    container = f"kubepods/burstable/pod{UID_A}/{CID_A}"
    file_cgroups.make(container)
    await client.create(
        "/api/v1/namespaces/default/pods",
        pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="x"),
    )
    agent = make_agent(client, file_cgroups, kubelet_state=state)
    agent.pods.replace(
        [PodView.of(pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="x"))]
    )

    await agent.reconcile()
    await events_posted(agent)

    assert "0-3" == (file_cgroups.root / container / "cpuset.cpus").read_text().strip()
    assert any(
        cluster.objects[k].raw.get("reason") == "KubeletCPUManagerStatic"
        for k in list(cluster.objects)
    )
