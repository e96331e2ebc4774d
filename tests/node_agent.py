"""The node half of the end-to-end tests that run the real operator against kmock: the
real agent loop, reading the kubelet harness's PodResources socket and writing a cgroup
tree of plain files (cgroup v1's shape; the real cgroup writes are covered in
tests/exporter/agent)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import signing_keys
from numatopo_exporter.agent.feedback import ALIGNED
from numatopo_exporter.agent.loop import AgentLoop
from numatopo_kube import KubeClient
from numatopo_kube.backoff import Backoff


def cgroup_tree(root: Path, uid: str, cid: str, *, cpus: str, mems: str = "0-1") -> None:
    """kubepods/pod<uid>/<container id> as plain files (a Guaranteed pod, cgroupfs), each
    level holding every CPU and memory node as a fresh node's do."""
    for relative in ("", "kubepods", f"kubepods/pod{uid}", f"kubepods/pod{uid}/{cid}"):
        path = root / relative
        path.mkdir(parents=True, exist_ok=True)
        (path / "cpuset.cpus").write_text(f"{cpus}\n")
        (path / "cpuset.mems").write_text(f"{mems}\n")


def aligned(cluster: Any, name: str) -> tuple[str, str] | None:
    """The pod's `Aligned` condition as (status, reason); None before the agent wrote one."""
    for condition in cluster.pods()[name].get("status", {}).get("conditions", []):
        if condition["type"] == ALIGNED:
            return condition["status"], condition.get("reason", "")
    return None


async def runs_and_aligns(cluster: Any, name: str, cid: str, wait: Any) -> None:
    """The kubelet reports `name` running its one Guaranteed container `main` (id `cid`);
    then the agent's `Aligned` must turn True (CpusetsApplied): its CPUs pinned."""
    container = {"name": "main", "containerID": f"containerd://{cid}", "state": {"running": {}}}
    status = {"phase": "Running", "qosClass": "Guaranteed", "containerStatuses": [container]}
    await cluster.patch_pod(name, {"status": status})
    await wait(
        lambda: aligned(cluster, name) == ("True", "CpusetsApplied"),
        what="Aligned: the CPUs pinned beside the claimed GPUs",
        timeout=20,
    )


@contextlib.asynccontextmanager
async def running_agent(
    api_url: str, node: str, cgroup_root: Path, pod_resources_socket: Path
) -> AsyncIterator[AgentLoop]:
    """The real agent loop of `node`, running until the block ends (no kubelet state
    file: the kubelet harness's PodResources answers are what it reads)."""
    client = KubeClient(component="numatopo-agent", host=node, timeout_seconds=5)
    await client.reconnect(api_url)
    agent = AgentLoop(
        client,
        node_name=node,
        verifier=signing_keys.VERIFIER,
        cgroup_root=cgroup_root,
        kubelet_state=cgroup_root / "no-kubelet-state",
        pod_resources_socket=pod_resources_socket,
        resync_seconds=0.3,
        backoff=Backoff(0.01, 0.05),
    )
    async with client:
        task = asyncio.create_task(agent.run())
        try:
            yield agent
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
