"""The agent's Events, posted off its pass (the emulated API over real HTTP, real cgroup
v1 cpusets or file trees): an Events API that never answers holds up no pod's cpusets
and no pod's status feedback, and the Events about one pod still arrive in the order
they were made."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest

from metric_samples import sample

from ..conftest import NodeClient, pod_path
from ..daemon.conftest import NODE
from .conftest import CgroupTree
from .test_agent_loop import CID_A, UID_A, Node, assignment, pod, shared, wait_for

EVENTS = "post /api/v1/namespaces/default/events"
# The client's timeout as the agent runs it (`KubeClient`'s default): an Event posted
# inline held the pass this long.
CLIENT_TIMEOUT = 30.0
# Far below the client's timeout, far above a pass on a loaded machine.
PROMPTLY = 10.0
POOL_PODS = ("b", "c", "d")
UID_E, CID_E = "eeeeeeee-0000-4000-8000-000000000005", "e0e0e0e0e0e0"


def pool_assignment(online: str) -> str:
    """A NUMA-pool claim: the node's CPUs, shared (cut to the shared pool)."""
    claim = {"cpus": online, "mems": "0", "exclusive": False}
    return json.dumps({"v": 1, "node": NODE, "containers": {"main": claim}})


class HangingEvents:
    """An Events API that answers no POST until `released` is set, recording each Event
    once, in the order the POSTs reach it."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.arrived: list[tuple[str, str, str]] = []
        self._names: set[str] = set()

    async def __call__(self, request: kmock.Request) -> dict[str, Any]:
        event = request.data
        # A POST the client retried after its timeout carries the same name.
        if event["metadata"]["name"] not in self._names:
            self._names.add(event["metadata"]["name"])
            self.arrived.append((event["involvedObject"]["name"], event["reason"], event["type"]))
        await self.released.wait()
        return {"apiVersion": "v1", "kind": "Event", "metadata": event["metadata"]}

    def about(self, name: str) -> list[tuple[str, str]]:
        return [(reason, kind) for who, reason, kind in self.arrived if who == name]


async def crowd(node: Node) -> list[str]:
    """Pod a holding CPU 1, pods b, c and d in the NUMA pool, and pod e claiming CPU 1
    after a (refused while a holds it); returns the pool pods' containers."""
    node.container(UID_A, CID_A)
    await node.create(
        pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="2024-01-01T00:00:00Z")
    )
    pool = pool_assignment(node.online)
    containers = []
    for index, name in enumerate(POOL_PODS):
        uid, cid = f"{name * 8}-0000-4000-8000-00000000000{index}", name * 12
        containers.append(node.container(uid, cid))
        await node.create(pod(name, uid, cid=cid, annotation=pool, created="2024-01-01T00:00:01Z"))
    node.container(UID_E, CID_E)
    await node.create(
        pod("e", UID_E, cid=CID_E, annotation=assignment("1"), created="2024-01-02T00:00:00Z")
    )
    return containers


@pytest.fixture
async def patient_client(cluster: kmock.KubernetesEmulator) -> AsyncIterator[NodeClient]:
    """The agent's client with the timeout it runs with, not the tests' short one."""
    client = NodeClient(
        str(cluster.url), timeout_seconds=CLIENT_TIMEOUT, retry_delays=(0.01, 0.02, 0.05)
    )
    await client.reconnect(str(cluster.url))
    async with client:
        yield client


async def test_a_hanging_events_api_holds_up_no_enforcement_or_status(
    cgroup_tree: CgroupTree, cluster: kmock.KubernetesEmulator, patient_client: NodeClient
) -> None:
    """Every Event waits on an API that does not answer; meanwhile every pod's cpusets
    are written and its `Aligned` condition and state come out promptly, not after one
    client timeout per Event. Pod e, refused while a holds CPU 1 and enforced
    once a is gone, has its two Events posted in that order once the API answers."""
    events = HangingEvents()
    cluster[EVENTS] << events
    node = Node(cgroup_tree, cluster, patient_client)
    pool_containers = await crowd(node)
    task = asyncio.create_task(node.agent.run())
    try:
        everyone = ("a", *POOL_PODS)
        await wait_for(
            lambda: (
                all((node.aligned(n), node.state(n)) == ("True", "Enforced") for n in everyone)
                and (node.aligned("e"), node.state("e")) == ("False", "EnforcementFailed")
            ),
            "every pod's Aligned condition and state written while no Event is answered",
            seconds=PROMPTLY,
        )
        assert "1" == node.cpus(f"kubepods/burstable/pod{UID_A}/{CID_A}")
        assert [shared(node.online)] * len(POOL_PODS) == [node.cpus(c) for c in pool_containers]

        await node.client.request("DELETE", pod_path("default", "a"))
        await wait_for(lambda: node.state("e") == "Enforced", "pod e enforced", seconds=PROMPTLY)
        assert "1" == node.cpus(f"kubepods/burstable/pod{UID_E}/{CID_E}")
        # All of it while the Events API hung, on its first POST (one post in flight).
        assert [("a", "Enforced", "Normal")] == events.arrived

        events.released.set()
        await wait_for(lambda: len(events.about("e")) == 2, "pod e's Events posted")
    finally:
        events.released.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert [("AssignmentOverlaps", "Warning"), ("Enforced", "Normal")] == events.about("e")
    assert [("Enforced", "Normal")] == events.about("b")


async def test_events_still_unposted_when_the_agent_stops_are_counted_as_dropped(
    file_cgroups: CgroupTree, cluster: kmock.KubernetesEmulator, patient_client: NodeClient
) -> None:
    """Five Events made while the Events API hangs: the first in flight, four queued. The
    agent stops: all five are counted in its metric (the pods' states hold what they
    said), and the agent's tasks end with it."""
    events = HangingEvents()
    cluster[EVENTS] << events
    node = Node(file_cgroups, cluster, patient_client)
    await crowd(node)
    task = asyncio.create_task(node.agent.run())
    try:
        await wait_for(
            lambda: all(node.state(n) for n in ("a", *POOL_PODS, "e")) and events.arrived,
            "every pod's state written, and one Event sent",
            seconds=PROMPTLY,
        )
        assert (1, 5) == (len(events.arrived), node.agent.events.pending)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        events.released.set()

    assert task.cancelled()
    assert 5 == sample(node.agent.metrics, "numatopo_agent_events_dropped_total")
    assert 0 == node.agent.events.pending
