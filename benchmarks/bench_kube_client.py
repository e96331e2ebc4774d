"""Which Kubernetes client library: import cost, resident memory and per-call time.

Each candidate is imported in a fresh interpreter (peak RSS and wall time of the import,
as a node process pays them at start), then times N GETs of one pod from kmock's
emulator over real HTTP. Raw aiohttp is the floor (what the hand-written clients were).

    python benchmarks/bench_kube_client.py [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

import kmock

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


async def per_call(url: str, calls: int) -> dict[str, float]:
    import aiohttp
    import kubernetes_asyncio.client as k8s

    from numatopo_kube import KubeClient

    path = "/api/v1/namespaces/default/pods/a"
    found: dict[str, float] = {}
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        for _ in range(calls):
            async with session.get(url + path) as response:
                json.loads(await response.text())
        found["aiohttp (floor)"] = (time.perf_counter() - start) / calls
    async with KubeClient.connect(url) as client:
        start = time.perf_counter()
        for _ in range(calls):
            await client.get_pod("default", "a")
        found["lightkube"] = (time.perf_counter() - start) / calls
    configuration = k8s.Configuration(host=url)
    async with k8s.ApiClient(configuration) as api:
        core = k8s.CoreV1Api(api)
        start = time.perf_counter()
        for _ in range(calls):
            await core.read_namespaced_pod("a", "default")
        found["kubernetes_asyncio"] = (time.perf_counter() - start) / calls
    return found


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    emulator = kmock.KubernetesEmulator()
    emulator.resources["v1/pods"] = kmock.ResourceInfo(namespaced=True, kind="Pod")
    emulator.objects["v1/pods", "default", "a"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "a", "namespace": "default", "uid": "u"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    async with kmock.Server(emulator):
        calls = await per_call(str(emulator.url).rstrip("/"), args.calls)
    print(f"{'library':<20} {'import s':>9} {'RSS MiB':>13} {'modules':>8} {'GET ms':>7}")
    for name, imports in IMPORTS.items():
        seconds, rss, modules = import_cost(imports)
        print(f"{name:<20} {seconds:>9.2f} {rss:>13.1f} {modules:>8} {calls[name] * 1e3:>7.2f}")


if __name__ == "__main__":
    asyncio.run(main())
