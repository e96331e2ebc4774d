"""A container that holds its own cgroups (a process manager inside it): the cgroups nested
in it are narrowed first, then the container; what cannot be fixed is reported."""

from __future__ import annotations

import os
from pathlib import PurePosixPath

import kmock

from numatopo_engine.cpuset import CPUSet
from numatopo_exporter.agent.feedback import ALIGNED
from numatopo_exporter.agent.loop import AgentLoop
from numatopo_exporter.agent.planning import Cpuset, Target, desire_cpusets, plan_writes
from numatopo_exporter.agent.pod_view import PodView

from ..conftest import NodeClient
from .conftest import CgroupTree, events_posted, make_agent
from .test_agent_loop import CID_A, PODS, UID_A, assignment, pod

CONTAINER = f"kubepods/burstable/pod{UID_A}/{CID_A}"


def aligned(cluster: kmock.KubernetesEmulator) -> dict[str, str]:
    body = cluster.objects[PODS, "default", "a"].raw
    (found,) = [c for c in body["status"].get("conditions", []) if c["type"] == ALIGNED]
    return dict(found)


async def start(client: NodeClient, tree: CgroupTree) -> AgentLoop:
    body = pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="x")
    await client.create("/api/v1/namespaces/default/pods", body)
    agent = make_agent(client, tree)
    agent.pods.replace([PodView.of(body)])
    return agent


async def test_a_container_with_nested_cgroups_is_narrowed(
    cluster: kmock.KubernetesEmulator, client: NodeClient, real_cgroups: CgroupTree
) -> None:
    """The kernel answers EBUSY to narrowing the container while a nested cgroup (here
    two levels deep, with a real process) still has the CPUs being removed."""
    real_cgroups.make(CONTAINER)
    real_cgroups.make(f"{CONTAINER}/supervisor/worker")
    pid = real_cgroups.spawn_in(f"{CONTAINER}/supervisor/worker")
    agent = await start(client, real_cgroups)

    await agent.reconcile()

    for relative in (CONTAINER, f"{CONTAINER}/supervisor", f"{CONTAINER}/supervisor/worker"):
        assert "1" == (real_cgroups.root / relative / "cpuset.cpus").read_text().strip()
    assert {1} == os.sched_getaffinity(pid)
    assert "True" == aligned(cluster)["status"]


async def test_a_nested_cgroup_that_cannot_be_read_is_reported_on_the_pod(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """Reported as the pod's condition and one Event, not logged and forgotten each pass."""
    file_cgroups.make(CONTAINER)
    nested = file_cgroups.root / CONTAINER / "supervisor"
    nested.mkdir()
    (nested / "cpuset.mems").write_text("0")
    (nested / "cpuset.cpus").mkdir()  # read(2) and write(2) both fail: EISDIR
    agent = await start(client, file_cgroups)

    for _ in range(3):
        await agent.reconcile()
    await events_posted(agent)

    condition = aligned(cluster)
    assert "False" == condition["status"]
    assert "supervisor/cpuset.cpus" in condition["message"]
    failures = [
        cluster.objects[k].raw["reason"]
        for k in list(cluster.objects)
        if cluster.objects[k].raw.get("kind") == "Event"
    ]
    assert ["EnforcementFailed"] == failures


def test_nested_cgroups_keep_what_they_have_inside_the_new_bound() -> None:
    """Pure planning: a nested cgroup keeps what it has inside the new bound; one with
    nothing left inside gets the whole bound; children are narrowed before parents."""
    container = PurePosixPath("kubepods/pod1/c1")
    inside, outside = container / "inside", container / "outside"
    observed = {
        PurePosixPath("kubepods"): Cpuset(CPUSet.parse("0-7"), CPUSet([0])),
        PurePosixPath("kubepods/pod1"): Cpuset(CPUSet.parse("0-7"), CPUSet([0])),
        container: Cpuset(CPUSet.parse("0-7"), CPUSet([0])),
        inside: Cpuset(CPUSet.parse("2-5"), CPUSet([0])),
        outside: Cpuset(CPUSet.parse("6-7"), CPUSet([0])),
    }
    target = Target(cpus=CPUSet.parse("2-3"))

    desired = desire_cpusets(
        online=Cpuset(CPUSet.parse("0-7"), CPUSet([0])),
        containers=[container],
        exclusive_targets={container: target},
        numa_targets={},
        exclusive=CPUSet.parse("2-3"),
        observed=observed,
    )
    writes = [str(w) for w in plan_writes(desired, observed)]

    assert [
        f"{outside}/cpuset.cpus = 2-3,6-7",  # widened first: still a subset of c1 (0-7)
        f"{inside}/cpuset.cpus = 2-3",
        f"{outside}/cpuset.cpus = 2-3",
        f"{container}/cpuset.cpus = 2-3",
    ] == writes
