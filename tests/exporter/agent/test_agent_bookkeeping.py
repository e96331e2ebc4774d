"""The agent's memory is bounded by the pods on its node: 20,000 pods come and go through
the real watch-event and reconcile functions, and nothing of them stays behind."""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc

import kmock

import signing_keys
from numatopo_exporter.agent.loop import AgentLoop
from numatopo_exporter.agent.watch import take_event

from ..conftest import NodeClient, pod_path
from ..daemon.conftest import NODE
from .conftest import CgroupTree, make_agent
from .test_agent_loop import CID_A, UID_A, assignment, pod, wait_for

LIFECYCLES = 20_000
# Pods that come and go between two passes, as on a busy node.
BATCH = 50
# Growth allowed once warmed up (dict slack); 20,000 remembered assignments (a key
# tuple, a float and a dict slot each) would be over 2 MiB.
ALLOWED_GROWTH_BYTES = 64 * 1024


def shared_claim(cpus: str) -> str:
    """CPUs of a NUMA node's shared pool: any number of pods can hold the same ones."""
    container = {"cpus": cpus, "mems": "0", "exclusive": False}
    return json.dumps({"v": 1, "node": NODE, "containers": {"main": container}})


def internal_sizes(agent: AgentLoop) -> dict[str, int]:
    """What the agent remembers: its pods' records, and how many carry each fact."""
    records = list(agent.pods)
    return {
        "pod_cache": len(records),
        "first_seen": sum(r.first_seen is not None for r in records),
        "enforced": sum(r.enforced is not None for r in records),
        "reported": sum(r.reported is not None for r in records),
    }


def enforced(agent: AgentLoop, uid: str) -> bool:
    record = agent.pods.get(uid)
    return record is not None and record.enforced is not None


async def test_pod_lifecycles_leave_nothing_behind(
    client: NodeClient, file_cgroups: CgroupTree
) -> None:
    agent = make_agent(client, file_cgroups, kubelet_state=None)
    await agent.reconcile()  # the one-off Enforcing report, before measuring

    async def lifecycles(first: int) -> None:
        """BATCH pods: assigned, re-decided by the operator, deleted; a pass after each."""
        numbers = range(first, first + BATCH)
        first_claim = shared_claim("0-3")
        # Not started (no container id): a pass plans and writes nothing and sends
        # nothing to the API, so only the bookkeeping is exercised.
        bodies = [
            pod(
                f"p{n}",
                f"{n:08x}-0000-4000-8000-0000",
                cid=None,
                annotation=first_claim,
                created="x",
            )
            for n in numbers
        ]
        for body in bodies:
            take_event(agent.pods, "ADDED", body)
        await agent.reconcile()
        moved = shared_claim("0-1")
        for body in bodies:
            body["metadata"]["annotations"]["numatopo.io/assignment"] = (
                signing_keys.signed_annotation(body, moved)
            )
            take_event(agent.pods, "MODIFIED", body)
        await agent.reconcile()
        for body in bodies:
            take_event(agent.pods, "DELETED", body)
        await agent.reconcile()

    tracemalloc.start()
    try:
        for first in range(0, 1000, BATCH):
            await lifecycles(first)
        gc.collect()
        before = tracemalloc.take_snapshot()
        for first in range(1000, LIFECYCLES, BATCH):
            await lifecycles(first)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # Only what the agent's own code allocated: the interpreter's tables (pathlib
    # interns every path component) get reallocated now and then, and when the old copy
    # predates tracing only the new one is seen, which says nothing about the agent.
    agent_code = [tracemalloc.Filter(True, "*/numatopo_exporter/*")]
    growth = sum(
        stat.size_diff
        for stat in after.filter_traces(agent_code).compare_to(
            before.filter_traces(agent_code), "filename"
        )
    )

    assert {"pod_cache": 0, "first_seen": 0, "enforced": 0, "reported": 0} == internal_sizes(agent)
    assert growth < ALLOWED_GROWTH_BYTES


async def test_an_enforced_pod_that_leaves_is_forgotten(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    """Through the running loop (watch + reconcile): enforced, deleted, nothing left."""
    file_cgroups.make(f"kubepods/burstable/pod{UID_A}/{CID_A}")
    await client.create(
        "/api/v1/namespaces/default/pods",
        pod("a", UID_A, cid=CID_A, annotation=assignment("1"), created="2024-01-01T00:00:00Z"),
    )
    agent = make_agent(client, file_cgroups, kubelet_state=None, resync_seconds=0.05)
    task = asyncio.create_task(agent.run())
    try:
        await wait_for(lambda: enforced(agent, UID_A), "pod a enforced")
        assert 1 == internal_sizes(agent)["first_seen"]
        await client.request("DELETE", pod_path("default", "a"))
        await wait_for(lambda: not any(internal_sizes(agent).values()), "pod a forgotten")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
