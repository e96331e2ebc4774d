"""Which Kubernetes client library: import cost, resident memory and per-call time.

Each candidate is imported in a fresh interpreter (peak RSS and wall time of the import,
as a node process pays them at start), then times N GETs from kmock's emulator over
real HTTP of the two objects numatopo reads most: a pod bound to a node and carrying its
`numatopo.io/assignment` (GPUs by UUID), and that node's `Numatopology` (an 8x H100
node of a real fleet, with its own name, GPU UUIDs and bus ids:
`simulation.fleet.identify`, about 17 KiB of JSON). Raw aiohttp is the floor (what the
hand-written clients were), measured in the same run.

    python benchmarks/bench_kube_client.py [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import kmock

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / p) for p in ("engine", "kube")]

from numatopo_engine.annotations import ASSIGNMENT, Assignment, ContainerAssignment  # noqa: E402
from numatopo_engine.cpuset import CPUSet  # noqa: E402
from numatopo_engine.model import Numatopology  # noqa: E402
from numatopo_engine.simulation.fleet import identify, node_name  # noqa: E402

NODE = node_name(1234)
POD = "/api/v1/namespaces/default/pods/train-0"
TOPOLOGY = f"/apis/numatopo.io/v1alpha1/numatopologies/{NODE}"

IMPORTS = {
    "aiohttp (floor)": "import aiohttp",
    "lightkube": "import lightkube, lightkube.generic_resource",
    "kubernetes_asyncio": "import kubernetes_asyncio.client, kubernetes_asyncio.config",
}

PROBE = """
import sys, time
t = time.perf_counter()
{imports}
took = time.perf_counter() - t
# VmRSS, not ru_maxrss: a child forked from a large parent inherits its peak.
rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS"))
print(took, rss / 1024, len(sys.modules))
"""


def import_cost(imports: str) -> tuple[float, float, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(imports=imports)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def objects() -> tuple[dict[str, Any], dict[str, Any]]:
    """The node's Numatopology and a 4-GPU pod assigned on it, as the cluster holds them."""
    fixture = REPO / "tests" / "fixtures" / "topologies" / "h100-nvswitch.json"
    spec = identify(Numatopology.model_validate_json(fixture.read_text()).spec, NODE)
    topology = {
        "apiVersion": "numatopo.io/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": NODE, "uid": "topology-uid"},
        "spec": spec.to_wire(),
    }
    gpus = [g for g in spec.gpus if g.numa == 0][:4]
    main = ContainerAssignment(
        cpus=CPUSet(range(8)),
        mems=CPUSet([0]),
        gpus=[g.uuid for g in gpus],
        gpu_indices=[g.index for g in gpus],
    )
    assignment = Assignment(node=NODE, numa_nodes=[0], containers={"main": main}, seq=1)
    limits = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-0", "namespace": "default", "uid": "pod-uid",
            "annotations": {ASSIGNMENT: assignment.to_annotation()},
        },
        "spec": {
            "nodeName": NODE,
            "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"requests": limits, "limits": limits},
            }],
        },
    }  # fmt: skip
    return pod, topology


async def per_call(url: str, calls: int) -> dict[str, tuple[float, float]]:
    """Per library: (seconds per pod GET, seconds per Numatopology GET)."""
    import aiohttp
    import kubernetes_asyncio.client as k8s

    from numatopo_kube import KubeClient

    async def timed(get: Callable[[], Awaitable[object]]) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            await get()
        return (time.perf_counter() - start) / calls

    found: dict[str, tuple[float, float]] = {}
    async with aiohttp.ClientSession() as session:

        async def raw(path: str) -> object:
            async with session.get(url + path) as response:
                return json.loads(await response.text())

        found["aiohttp (floor)"] = (
            await timed(lambda: raw(POD)),
            await timed(lambda: raw(TOPOLOGY)),
        )
    async with KubeClient.connect(url) as client:
        found["lightkube"] = (
            await timed(lambda: client.get_pod("default", "train-0")),
            await timed(lambda: client.get_numatopology(NODE)),
        )
    configuration = k8s.Configuration(host=url)
    async with k8s.ApiClient(configuration) as api:
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        found["kubernetes_asyncio"] = (
            await timed(lambda: core.read_namespaced_pod("train-0", "default")),
            await timed(
                lambda: custom.get_cluster_custom_object(
                    "numatopo.io", "v1alpha1", "numatopologies", NODE
                )
            ),
        )
    return found


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    pod, topology = objects()
    emulator = kmock.KubernetesEmulator()
    emulator.resources["v1/pods"] = kmock.ResourceInfo(namespaced=True, kind="Pod")
    emulator.resources["numatopo.io/v1alpha1/numatopologies"] = kmock.ResourceInfo(
        namespaced=False, kind="Numatopology"
    )
    emulator.objects["v1/pods", "default", "train-0"] = pod
    emulator.objects["numatopo.io/v1alpha1/numatopologies", None, NODE] = topology
    async with kmock.Server(emulator):
        calls = await per_call(str(emulator.url).rstrip("/"), args.calls)
    print(f"Numatopology {NODE}: {len(json.dumps(topology)) / 1024:.0f} KiB of JSON")
    floor_pod, floor_topology = calls["aiohttp (floor)"]
    print(
        f"{'library':<20} {'import s':>9} {'RSS MiB':>8} {'modules':>8} "
        f"{'pod GET ms':>11} {'x floor':>8} {'NTP GET ms':>11} {'x floor':>8}"
    )
    for name, imports in IMPORTS.items():
        seconds, rss, modules = import_cost(imports)
        pod_s, topology_s = calls[name]
        print(
            f"{name:<20} {seconds:>9.2f} {rss:>8.1f} {modules:>8} {pod_s * 1e3:>11.2f} "
            f"{pod_s / floor_pod:>7.1f}x {topology_s * 1e3:>11.2f} "
            f"{topology_s / floor_topology:>7.1f}x"
        )


if __name__ == "__main__":
    asyncio.run(main())
