"""The operator at the size of a real GPU cluster: real `numatopo operator` processes
over HTTP against kmock's Kubernetes emulator (not a timed test; figures to quote).

The cluster: `--nodes` nodes of the fixtures' real shapes (tests/fixtures/topologies,
in turn), each with its own name, GPU UUIDs and a fresh heartbeat, a Node object each;
`--pods` pods, a third of them running with a numatopo assignment (4 CPUs, a GPU where
the node has one left), the rest ordinary pods numatopo never decides. Objects are put
straight into the emulator's store, as if they had been there before the operator.

Printed, each with its baseline:

  emulator   the emulator's own latency: one LIST of every pod, one PATCH of a pod
  start-up   process start -> the first pod decided (a waiting pod created beforehand),
             the operator's CPU time and RSS then
  burst      `--burst` waiting pods created at once: pods decided per second,
             creation -> decision p50/p99, the operator's CPU per pod, the RSS after
  failover   a second replica on the same Lease, kill -9 of the holder: kill -> the next
             pod decided (and the new holder's CPU time meanwhile), and the
             Numatopology status PATCHes the new holder sent

    .venv/bin/python benchmarks/bench_operator_scale.py [--nodes 100] [--pods 3000]
        [--burst 300] [--no-failover]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "engine"), str(REPO / "operator"), str(REPO / "kube")]

import aiohttp  # noqa: E402
import kmock  # noqa: E402
from tests.controller.conftest import _register  # noqa: E402

from numatopo_cli.progress import progress_bar  # noqa: E402
from numatopo_engine import annotations as keys  # noqa: E402
from numatopo_engine.annotations import Assignment, ContainerAssignment  # noqa: E402
from numatopo_engine.cpuset import CPUSet  # noqa: E402

TOPOLOGIES = REPO / "tests" / "fixtures" / "topologies"
SHAPES = ["h100-nvswitch", "dgx1-v100", "aws-p4d", "pcie-8gpu", "gb200-like", "cpu-2socket-ht"]
NAMESPACE = "numatopo-system"
PODS_PER_NODE_MAX = 10
GIB = 1 << 30


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def numatopology(shape: str, node: str) -> dict[str, Any]:
    body = json.loads((TOPOLOGIES / f"{shape}.json").read_text())
    spec = body["spec"]
    for gpu in spec.get("gpus", []):
        gpu["uuid"] = f"GPU-{node}-{gpu['index']:02d}"
        for mig in gpu.get("migDevices", []):
            mig["uuid"] = f"MIG-{node}-{gpu['index']:02d}-{mig.get('index', 0)}"
    return {
        "apiVersion": "numatopo.io/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": node, "uid": f"ntp-{node}", "resourceVersion": "1"},
        "spec": spec,
        "status": {
            "heartbeat": _now(),
            "conditions": [{"type": "Exported", "status": "True", "reason": "Published"}],
        },
    }


def node_object(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "uid": f"node-{node}",
            "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": node},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(
    name: str, node: str | None, *, annotations: dict[str, str], gpus: int = 0
) -> dict[str, Any]:
    resources: dict[str, Any] = {"cpu": "4", "memory": "1Gi"}
    if gpus:
        resources["nvidia.com/gpu"] = gpus
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": resources, "limits": resources},
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def assigned_pods(node: str, spec: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """`count` pods with a valid assignment each: 4 CPUs of one NUMA node and a GPU there."""
    pods = []
    numas = sorted(spec["numaNodes"], key=lambda n: n["id"])
    cpus_of = {n["id"]: sorted(CPUSet.parse(n["cpus"])) for n in numas}
    reserved = set(CPUSet.parse(spec.get("reservedCPUs") or ""))
    free_gpus = {n["id"]: [g for g in spec.get("gpus", []) if g["numa"] == n["id"]] for n in numas}
    taken = {n["id"]: 0 for n in numas}
    for i in range(count):
        numa = numas[i % len(numas)]["id"]
        usable = [c for c in cpus_of[numa] if c not in reserved]
        cpus = usable[taken[numa] : taken[numa] + 4]
        taken[numa] += 4
        gpu = free_gpus[numa].pop(0) if free_gpus[numa] else None
        container = ContainerAssignment(
            cpus=CPUSet(cpus),
            mems=CPUSet([numa]),
            gpus=[gpu["uuid"]] if gpu else [],
            gpu_indices=[gpu["index"]] if gpu else [],
            memory={str(numa): GIB},
        )
        assignment = Assignment(
            node=node,
            numa_nodes=[numa],
            policy="single-numa-node",
            containers={"main": container},
            seq=i + 1,
        )
        annotations = {
            keys.POLICY: "single-numa-node",
            keys.ASSIGNMENT: assignment.to_annotation(),
            keys.STATE: "Assigned",
        }
        pods.append(pod(f"{node}-job-{i}", node, annotations=annotations, gpus=1 if gpu else 0))
    return pods


def build(api: kmock.KubernetesEmulator, nodes: int, pods: int) -> list[str]:
    names = []
    annotated = pods // 3
    per_node = max(1, min(PODS_PER_NODE_MAX, annotated // max(nodes, 1)))
    made = 0
    bar = progress_bar("nodes")
    for n in range(nodes):
        if bar is not None:
            bar(n + 1, nodes)
        shape = SHAPES[n % len(SHAPES)]
        name = f"{shape}-{n:05d}"
        names.append(name)
        body = numatopology(shape, name)
        api.objects["numatopo.io/v1alpha1/numatopologies", None, name] = body
        api.objects["v1/nodes", None, name] = node_object(name)
        if made < annotated:
            for found in assigned_pods(name, body["spec"], min(per_node, annotated - made)):
                api.objects["v1/pods", "default", found["metadata"]["name"]] = found
                made += 1
    for i in range(pods - made):
        other = pod(f"web-{i}", names[i % len(names)], annotations={})
        api.objects["v1/pods", "default", other["metadata"]["name"]] = other
    for name in ("op-a", "op-b"):
        api.objects["v1/pods", NAMESPACE, name] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
            "spec": {"containers": []},
        }
    return names


def state_of(api: kmock.KubernetesEmulator, name: str) -> str | None:
    try:
        found = api.objects["v1/pods", "default", name]
    except KeyError:
        return None
    return (found.raw.get("metadata", {}).get("annotations") or {}).get(keys.STATE)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used: on a shared machine, what the
    operator itself costs, apart from the emulator and the other load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_patches(api: kmock.KubernetesEmulator) -> int:
    return sum(
        1
        for request in api
        if str(request.method).upper().endswith("PATCH")
        and "numatopologies" in request.url.path
        and request.url.path.endswith("/status")
    )


async def start(name: str, config: Path, log: Any) -> asyncio.subprocess.Process:
    numatopo = Path(sys.executable).with_name("numatopo")
    return await asyncio.create_subprocess_exec(
        str(numatopo),
        "operator",
        "--lease-name=numatopo",
        f"--pod-name={name}",
        f"--pod-namespace={NAMESPACE}",
        "--listen-host=127.0.0.1",
        "--extender-insecure-plain-http",
        "--extender-port=0",
        "--metrics-port=0",
        env={**os.environ, "KUBECONFIG": str(config)},
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )


async def create(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> None:
    async with session.post(f"{url}/api/v1/namespaces/default/pods", json=body) as response:
        assert response.status < 300, await response.text()


async def until_decided(
    api: kmock.KubernetesEmulator, names: list[str], timeout: float
) -> dict[str, float]:
    """name -> when (monotonic) it was first seen decided; polls the store."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < len(names) and time.monotonic() < deadline:
        now = time.monotonic()
        for name in names:
            if name not in seen and state_of(api, name) not in (None, ""):
                seen[name] = now
        await asyncio.sleep(0.05)
    return seen


async def run(args: argparse.Namespace) -> None:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        _register(api)
        url = str(api.url).rstrip("/")
        t = time.monotonic()
        nodes = build(api, args.nodes, args.pods)
        print(
            f"cluster: {args.nodes} nodes, {args.pods} pods ({args.pods // 3} annotated), "
            f"built in {time.monotonic() - t:.1f} s"
        )
        tmp = Path(tempfile.mkdtemp(prefix="numatopo-scale-"))
        config = tmp / "kubeconfig"
        config.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: emu\n"
            f"clusters: [{{name: emu, cluster: {{server: '{url}'}}}}]\n"
            "users: [{name: emu, user: {}}]\n"
            "contexts: [{name: emu, context: {cluster: emu, user: emu}}]\n"
        )
        async with aiohttp.ClientSession() as session:
            t = time.monotonic()
            async with session.get(f"{url}/api/v1/pods") as response:
                listed = len((await response.json())["items"])
            list_s = time.monotonic() - t
            t = time.monotonic()
            async with session.patch(
                f"{url}/api/v1/namespaces/default/pods/web-0",
                json={"metadata": {"labels": {"bench": "1"}}},
            ) as response:
                assert response.status < 300
            patch_ms = (time.monotonic() - t) * 1000
            print(f"emulator: LIST of {listed} pods {list_s:.2f} s, one PATCH {patch_ms:.1f} ms")

            probe_node = nodes[0]
            await create(
                session,
                url,
                pod("probe-startup", probe_node, annotations={keys.POLICY: "single-numa-node"}),
            )
            logs = {name: (tmp / f"{name}.log").open("wb") for name in ("op-a", "op-b")}
            started = time.monotonic()
            processes = {"op-a": await start("op-a", config, logs["op-a"])}
            try:
                seen = await until_decided(api, ["probe-startup"], args.timeout)
                if not seen:
                    print(
                        f"start-up: nothing decided within {args.timeout:.0f} s "
                        f"(log: {tmp}/op-a.log)"
                    )
                    return
                pid = processes["op-a"].pid
                print(
                    f"start-up: first decision {seen['probe-startup'] - started:.1f} s after "
                    f"the process started, {cpu_seconds(pid):.1f} s of its CPU; "
                    f"RSS {rss_mib(pid):.0f} MiB"
                )
                burst = [f"burst-{i}" for i in range(args.burst)]
                created: dict[str, float] = {}
                cpu_before = cpu_seconds(pid)
                t0 = time.monotonic()
                for i, name in enumerate(burst):
                    await create(
                        session,
                        url,
                        pod(
                            name,
                            nodes[i % len(nodes)],
                            annotations={keys.POLICY: "single-numa-node"},
                        ),
                    )
                    created[name] = time.monotonic()
                creating = time.monotonic() - t0
                seen = await until_decided(api, burst, args.timeout)
                if seen:
                    latencies = sorted(seen[n] - created[n] for n in seen)
                    span = max(seen.values()) - t0
                    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
                    print(
                        f"burst: {len(seen)}/{len(burst)} decided, {len(seen) / span:.0f} pods/s "
                        f"(creating them took {creating:.1f} s), creation->decision p50 "
                        f"{statistics.median(latencies):.2f} s p99 {p99:.2f} s; "
                        f"{(cpu_seconds(pid) - cpu_before) * 1000 / len(seen):.1f} ms of the "
                        f"operator's CPU per pod; RSS {rss_mib(pid):.0f} MiB"
                    )
                if args.no_failover:
                    return
                processes["op-b"] = await start("op-b", config, logs["op-b"])
                await asyncio.sleep(args.standby_warmup)
                standby_cpu = cpu_seconds(processes["op-b"].pid)
                patches_before = status_patches(api)
                processes["op-a"].send_signal(signal.SIGKILL)
                killed = time.monotonic()
                await create(
                    session,
                    url,
                    pod(
                        "probe-failover",
                        nodes[1 % len(nodes)],
                        annotations={keys.POLICY: "single-numa-node"},
                    ),
                )
                seen = await until_decided(api, ["probe-failover"], args.timeout)
                if seen:
                    print(
                        f"failover: next pod decided {seen['probe-failover'] - killed:.1f} s "
                        "after kill -9 of the holder, "
                        f"{cpu_seconds(processes['op-b'].pid) - standby_cpu:.1f} s of the new "
                        "holder's CPU"
                    )
                else:
                    print("failover: nothing decided")
                await asyncio.sleep(5.0)
                print(
                    f"failover: the new holder sent {status_patches(api) - patches_before} "
                    f"Numatopology status PATCHes in its first {time.monotonic() - killed:.0f} s "
                    f"({args.nodes} nodes); RSS {rss_mib(processes['op-b'].pid):.0f} MiB"
                )
            finally:
                for process in processes.values():
                    if process.returncode is None:
                        process.send_signal(signal.SIGKILL)
                    await process.wait()
                for log in logs.values():
                    log.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--standby-warmup",
        type=float,
        default=20.0,
        help="seconds the standby watches before the kill",
    )
    parser.add_argument("--no-failover", action="store_true")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
