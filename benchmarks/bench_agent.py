"""Plan+apply latency of the agent for 100 pods x 2 containers, and its resident memory.

    .venv/bin/python benchmarks/bench_agent.py [--pods 100] [--repeat 20]

The node is a file tree in a temporary directory shaped like the kubelet's cgroupfs
layout on cgroup v1 (kubepods/pod<uid>/<container id>, Guaranteed tier), 256 CPUs and
8 memory nodes; every container has one exclusive CPU. The agent is the real
`AgentLoop`, its pod cache filled as the watch would fill it; its API client answers
every call locally with an empty object, so the times are the agent's own work:
read every cgroup, plan, write, read back to verify, build the pod reports.

Rows: the first reconcile (every cpuset written), a reconcile with nothing to do (the
periodic drift check), and a reconcile after one container's cpuset was rewritten
(one drift correction); best and median of N. Memory: this process's RSS after the
runs (it holds what `numatopo agent` holds: the agent, lightkube and httpx, asyncio's
server for /metrics, prometheus_client, the pod cache) and its peak (ru_maxrss).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from numatopo_engine.signing import Verifier
from numatopo_exporter.agent import cgroups
from numatopo_exporter.agent import serve as agent_serve  # noqa: F401 (its imports count)
from numatopo_exporter.agent.loop import AgentLoop
from numatopo_exporter.agent.pod_view import PodView
from numatopo_kube import KubeClient

NODE = "bench-node"
CPUS = 256
MEMS = "0-7"


class LocalApi(KubeClient):
    """Answers every API call the agent's reconcile makes without a network round trip
    (never connected: a call it does not answer fails as "not connected")."""

    async def patch_pod_status(
        self, namespace: str, name: str, patch: Any, *, content_type: str
    ) -> None:
        return None

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        return None

    async def get_pod_status(self, namespace: str, name: str) -> dict[str, Any]:
        return {}

    async def post_event(
        self, about: Mapping[str, str], *, warning: bool, reason: str, message: str
    ) -> bool:
        return True

    async def apply_numatopology_status(
        self, name: str, status: dict[str, Any], *, field_manager: str
    ) -> dict[str, Any]:
        return {}


def pod(index: int) -> dict[str, Any]:
    uid = f"00000000-0000-4000-8000-{index:012d}"
    containers = {f"c{k}": {"cpus": str(2 * index + k), "mems": str(index % 8)} for k in (0, 1)}
    annotation = json.dumps({"v": 1, "node": NODE, "containers": containers})
    return {
        "metadata": {
            "name": f"pod-{index}",
            "namespace": "bench",
            "uid": uid,
            "annotations": {"numatopo.io/assignment": annotation},
            "creationTimestamp": f"2025-01-01T00:{index // 60:02d}:{index % 60:02d}Z",
        },
        "spec": {"nodeName": NODE, "containers": [{"name": n} for n in containers]},
        "status": {
            "phase": "Running",
            "qosClass": "Guaranteed",
            "containerStatuses": [
                {"name": n, "containerID": f"containerd://{uid[-12:]}{n}", "state": {"running": {}}}
                for n in containers
            ],
        },
    }


def build_tree(root: Path, pods: list[dict[str, Any]]) -> list[Path]:
    """The cgroupfs hierarchy with every cpuset at the node's full set; container dirs."""

    def cgroup(path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / "cpuset.cpus").write_text(f"0-{CPUS - 1}\n")
        (path / "cpuset.mems").write_text(f"{MEMS}\n")

    cgroup(root)
    cgroup(root / "kubepods")
    containers = []
    for body in pods:
        uid = body["metadata"]["uid"]
        pod_dir = root / cgroups.pod_dir(cgroups.Driver.CGROUPFS, cgroups.QosClass.GUARANTEED, uid)
        cgroup(pod_dir)
        cgroup(pod_dir / "pause0123456789")  # the sandbox: runs on the shared pool
        for status in body["status"]["containerStatuses"]:
            container = pod_dir / status["containerID"].split("://")[1]
            cgroup(container)
            containers.append(container)
    return containers


async def timed(loop: AgentLoop) -> float:
    started = time.perf_counter()
    await loop.reconcile()
    return time.perf_counter() - started


async def bench(pods: int, repeat: int) -> None:
    bodies = [pod(i) for i in range(pods)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        containers = build_tree(root, bodies)
        async with LocalApi(component="numatopo-agent", host=NODE) as client:
            # Unsigned pods, as a node without keys would see them: the check is not what is timed.
            loop = AgentLoop(
                client,
                node_name=NODE,
                cgroup_root=root,
                kubelet_state=None,
                verifier=Verifier(accept_unsigned=True),
            )
            loop.pods.replace(PodView.of(body) for body in bodies)
            first = await timed(loop)
            writes = int(loop.metrics.value("numatopo_agent_cpuset_writes_total"))
            idle = [await timed(loop) for _ in range(repeat)]
            drift = []
            for _ in range(repeat):
                (containers[0] / "cpuset.cpus").write_text(f"0-{CPUS - 1}\n")
                drift.append(await timed(loop))
            assert (containers[0] / "cpuset.cpus").read_text() == "0", "drift not corrected"
    rss = psutil.Process().memory_info().rss
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    print(f"{pods} pods x 2 containers, {CPUS} CPUs, cgroup v1 cgroupfs file tree")
    print(f"{'first reconcile: every cpuset (ms)':44} {first * 1e3:10.1f}  ({writes} writes)")
    for name, times in (("nothing to do", idle), ("one drift corrected", drift)):
        best, median = min(times) * 1e3, statistics.median(times) * 1e3
        print(f"{name + ', best / median (ms)':44} {best:10.1f} / {median:.1f}")
    print(f"{'resident memory now (MiB)':44} {rss / 2**20:10.1f}")
    print(f"{'resident memory peak (MiB)':44} {peak_kib / 1024:10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(bench(args.pods, args.repeat))


if __name__ == "__main__":
    main()
