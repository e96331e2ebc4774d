"""What the agent writes to pods (the emulated API over real HTTP, file cgroups): only its
own condition, Events that say something new, and the CPUs really applied."""

from __future__ import annotations

import copy
import json
from pathlib import PurePosixPath
from typing import Any

import kmock
import pytest

from metric_samples import sample
from numatopo_engine.cpuset import CPUSet
from numatopo_exporter.agent import cgroupfs
from numatopo_exporter.agent.feedback import ALIGNED
from numatopo_exporter.agent.planning import CpusetWrite
from numatopo_exporter.agent.pod_view import PodView

from ..conftest import NodeClient, pod_path
from ..daemon.conftest import NODE
from .conftest import CgroupTree, events_posted, make_agent
from .test_agent_loop import CID_A, CID_B, PODS, UID_A, UID_B, assignment, pod

CONTAINER_A = f"kubepods/burstable/pod{UID_A}/{CID_A}"


def ready(status: str, when: str) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "lastTransitionTime": when}


def conditions(cluster: kmock.KubernetesEmulator, name: str) -> dict[str, dict[str, Any]]:
    body = cluster.objects[PODS, "default", name].raw
    return {c["type"]: dict(c) for c in body.get("status", {}).get("conditions", [])}


def events(cluster: kmock.KubernetesEmulator) -> list[tuple[str, str, str]]:
    found = []
    for key in list(cluster.objects):
        body = cluster.objects[key].raw
        if body.get("kind") == "Event":
            found.append((body["involvedObject"]["name"], body["reason"], body["message"]))
    return found


async def fresh_copy(client: NodeClient, name: str) -> dict[str, Any]:
    return await client.get(pod_path("default", name))


async def test_the_kubelets_newer_ready_survives_the_agents_write(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """The agent read the pod while Ready was False; the kubelet then wrote Ready=True.
    Writing Aligned from the stale copy must not bring the old Ready back."""
    file_cgroups.make(CONTAINER_A)
    body = pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="x")
    body["status"]["conditions"] = [ready("False", "2024-01-01T00:00:00Z")]
    await client.create("/api/v1/namespaces/default/pods", body)
    agent = make_agent(client, file_cgroups)
    agent.pods.replace([PodView.of(copy.deepcopy(await fresh_copy(client, "a")))])
    newer = [ready("True", "2024-01-01T00:00:05Z")]
    await client.patch(
        pod_path("default", "a", subresource="status"), {"status": {"conditions": newer}}
    )

    await agent.reconcile()

    found = conditions(cluster, "a")
    assert "True" == found["Ready"]["status"]
    assert "True" == found[ALIGNED]["status"]


async def test_a_moved_aligned_condition_is_rewritten_in_place(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """The agent's copy has Aligned first; the kubelet has since rewritten the list with
    Ready first. The guarded patch misses, the agent re-reads, and nothing else changes."""
    file_cgroups.make(CONTAINER_A)
    body = pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="x")
    old_aligned = {"type": ALIGNED, "status": "False", "reason": "CgroupNotFound"}
    body["status"]["conditions"] = [old_aligned, ready("False", "2024-01-01T00:00:00Z")]
    await client.create("/api/v1/namespaces/default/pods", body)
    agent = make_agent(client, file_cgroups)
    agent.pods.replace([PodView.of(copy.deepcopy(await fresh_copy(client, "a")))])
    reordered = [ready("True", "2024-01-01T00:00:05Z"), old_aligned]
    await client.patch(
        pod_path("default", "a", subresource="status"), {"status": {"conditions": reordered}}
    )

    await agent.reconcile()

    listed = cluster.objects[PODS, "default", "a"].raw["status"]["conditions"]
    assert ["Ready", ALIGNED] == [c["type"] for c in listed]
    assert ["True", "True"] == [c["status"] for c in listed]


async def test_a_second_failure_after_recovery_posts_an_event_again(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """Fail (cgroup missing), recover, fail again for the same reason: two Events."""
    body = pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="x")
    await client.create("/api/v1/namespaces/default/pods", body)
    agent = make_agent(client, file_cgroups)

    async def one_pass() -> None:
        agent.pods.replace([PodView.of(await fresh_copy(client, "a"))])
        await agent.reconcile()

    await one_pass()  # no cgroup yet
    file_cgroups.make(CONTAINER_A)
    await one_pass()  # enforced
    (file_cgroups.root / CONTAINER_A / "cpuset.cpus").write_text("1")
    for name in ("cpuset.cpus", "cpuset.mems"):
        (file_cgroups.root / CONTAINER_A / name).unlink()
    (file_cgroups.root / CONTAINER_A).rmdir()
    await one_pass()  # the cgroup is missing again
    await events_posted(agent)

    failures = [e for e in events(cluster) if e[1] == "EnforcementFailed"]
    assert 2 == len(failures)
    assert "False" == conditions(cluster, "a")[ALIGNED]["status"]


async def test_a_restarted_agent_does_not_announce_enforcement_again(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    file_cgroups.make(CONTAINER_A)
    await client.create(
        "/api/v1/namespaces/default/pods",
        pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="x"),
    )
    first = make_agent(client, file_cgroups)
    first.pods.replace([PodView.of(await fresh_copy(client, "a"))])
    await first.reconcile()
    await events_posted(first)
    restarted = make_agent(client, file_cgroups)
    restarted.pods.replace([PodView.of(await fresh_copy(client, "a"))])

    await restarted.reconcile()
    await events_posted(restarted)

    assert 1 == sum(1 for e in events(cluster) if e[1] == "Enforced")
    assert 0 == sample(restarted.metrics, "numatopo_agent_enforcements_total")


async def test_messages_name_the_cpus_applied_not_the_assignment(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """A NUMA-pool container assigned 0-3 while pod a holds CPU 1 exclusively runs on
    0,2-3: that is what the Event and the condition must say."""
    container_b = f"kubepods/burstable/pod{UID_B}/{CID_B}"
    file_cgroups.make(CONTAINER_A)
    file_cgroups.make(container_b)
    numa = json.dumps(
        {
            "v": 1,
            "node": NODE,
            "seq": 2,
            "containers": {"main": {"cpus": "0-3", "mems": "0", "exclusive": False}},
        }
    )
    await client.create(
        "/api/v1/namespaces/default/pods",
        pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="x"),
    )
    await client.create(
        "/api/v1/namespaces/default/pods", pod("b", UID_B, cid=CID_B, annotation=numa, created="x")
    )
    agent = make_agent(client, file_cgroups)
    agent.pods.replace([PodView.of(await fresh_copy(client, n)) for n in ("a", "b")])

    await agent.reconcile()
    await events_posted(agent)

    (message,) = [e[2] for e in events(cluster) if e[:2] == ("b", "Enforced")]
    assert "main: cpus 0,2-3 mems 0" in message
    assert "main: cpus 0,2-3 mems 0" == conditions(cluster, "b")[ALIGNED]["message"]


def test_a_removed_cgroup_reads_as_gone_and_is_never_written(cgroup_tree: CgroupTree) -> None:
    """The container exited after the agent listed its cgroup: reading it must not give
    an empty cpuset (the planner would then write into it), and writing must not
    recreate anything."""
    cgroup_tree.make(CONTAINER_A)
    hierarchy = cgroupfs.detect_hierarchy(cgroup_tree.root)
    path = PurePosixPath(CONTAINER_A)
    directory = cgroup_tree.root / CONTAINER_A
    if not cgroup_tree.real:  # a real cgroup's files vanish with its directory
        for name in ("cpuset.cpus", "cpuset.mems"):
            (directory / name).unlink()
    directory.rmdir()

    with pytest.raises(cgroupfs.CgroupGoneError):
        hierarchy.read(path)
    with pytest.raises(cgroupfs.CgroupGoneError):
        hierarchy.write(CpusetWrite(path, "cpuset.cpus", CPUSet([1])))
    assert not directory.exists()
