"""Memory of the real node agent (`numatopo agent`) on a 128-CPU node, and where it goes.

    .venv/bin/python benchmarks/bench_agent_memory.py [--pods 60] [--settle 5]

The agent runs as its own process, started as the chart starts it (`python -m
numatopo_cli.main agent`, /metrics on, signed assignments only), against kmock's
Kubernetes emulator served over HTTP by this process: a Node, its Numatopology (128
CPUs, 2 NUMA nodes) and `--pods` Guaranteed pods of two containers, each assigned one
exclusive CPU and signed with a key made here. Its cgroups are a cgroup-v1-shaped file
tree in a temporary directory; PodResources is off (no kubelet), so Follow reads
nothing, but every module it needs is imported as on a node.

Rows: the agent's resident memory once every cpuset is written, its largest during
`--settle` seconds of resyncs after that (VmRSS sampled), and the kernel's peak (VmHWM).
Then where it goes: the resident memory each top-level package adds when imported in
the order the agent imports them (the first importer of a shared dependency pays for
it), with its modules and its own import time (`python -X importtime`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kmock
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Cpu, NumaNode, NumatopologySpec
from numatopo_engine.signing import PodIdentity, Signer
from numatopo_exporter.agent import cgroups

NODE = "bench-node"
CPUS = 128
NUMA = 2
VERBS = {"list", "watch", "get", "create", "patch", "delete"}
STARTUP = {"sitecustomize", "_distutils_hack"}  # the interpreter's, before any import here
AGENT_IMPORT = "from numatopo_cli.main import build_parser; build_parser('agent')"


def spec() -> NumatopologySpec:
    per = CPUS // NUMA
    return NumatopologySpec(
        numa_nodes=[
            NumaNode(id=n, cpus=f"{n * per}-{(n + 1) * per - 1}", memory_bytes=1 << 38)
            for n in range(NUMA)
        ],
        cpus=[Cpu(id=c, core=c % per, socket=c // per, numa=c // per) for c in range(CPUS)],
    )


def pod(index: int, signer: Signer) -> dict[str, Any]:
    uid = f"00000000-0000-4000-8000-{index:012d}"
    name = f"pod-{index}"
    cpus = {f"c{k}": 2 + 2 * index + k for k in (0, 1)}
    assignment = Assignment(
        node=NODE,
        seq=index + 1,
        containers={
            c: ContainerAssignment(cpus=CPUSet([cpu]), mems=CPUSet([cpu * NUMA // CPUS]))
            for c, cpu in cpus.items()
        },
    )
    signed = signer.sign(assignment, PodIdentity(uid, f"bench/{name}"))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": uid,
            "annotations": {"numatopo.io/assignment": signed.to_annotation()},
            "creationTimestamp": "2025-01-01T00:00:00Z",
        },
        "spec": {"nodeName": NODE, "containers": [{"name": c} for c in cpus]},
        "status": {
            "phase": "Running",
            "qosClass": "Guaranteed",
            "containerStatuses": [
                {"name": c, "containerID": f"containerd://{uid[-12:]}{c}", "state": {"running": {}}}
                for c in cpus
            ],
        },
    }


def build_tree(root: Path, pods: list[dict[str, Any]]) -> dict[Path, str]:
    """The cgroupfs hierarchy at the node's full set; container dir -> its assigned CPU."""

    def cgroup(path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / "cpuset.cpus").write_text(f"0-{CPUS - 1}\n")
        (path / "cpuset.mems").write_text(f"0-{NUMA - 1}\n")

    cgroup(root)
    cgroup(root / "kubepods")
    wanted = {}
    for body in pods:
        uid = body["metadata"]["uid"]
        assignment = Assignment.model_validate_json(
            body["metadata"]["annotations"]["numatopo.io/assignment"]
        )
        tier = cgroups.QosClass.GUARANTEED
        pod_dir = root / cgroups.pod_dir(cgroups.Driver.CGROUPFS, tier, uid)
        cgroup(pod_dir)
        for status in body["status"]["containerStatuses"]:
            container = pod_dir / status["containerID"].split("://")[1]
            cgroup(container)
            wanted[container] = str(assignment.containers[status["name"]].cpus)
    return wanted


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid`, KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def create(api: kmock.KubernetesEmulator, path: str, body: dict[str, Any]) -> None:
    async with api.post(path, json=body) as response:
        assert response.status < 300, await response.text()


async def run_agent(pods: int, settle: float) -> dict[str, float]:
    private = Ed25519PrivateKey.generate()
    signer = Signer(private)
    bodies = [pod(i, signer) for i in range(pods)]
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        api.resources["v1/pods"] = kmock.ResourceInfo(
            kind="Pod", namespaced=True, verbs=VERBS, subresources={"status"}
        )
        api.resources["v1/nodes"] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs=VERBS)
        api.resources["v1/events"] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs=VERBS)
        api.resources["numatopo.io/v1alpha1/numatopologies"] = kmock.ResourceInfo(
            kind="Numatopology", namespaced=False, verbs=VERBS, subresources={"status"}
        )
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid"}}
        await create(api, "/api/v1/nodes", node)
        await create(api, "/apis/numatopo.io/v1alpha1/numatopologies", {
            "apiVersion": "numatopo.io/v1alpha1", "kind": "Numatopology",
            "metadata": {"name": NODE, "uid": "topology-uid"}, "spec": spec().to_wire(),
        })  # fmt: skip
        for body in bodies:
            await create(api, "/api/v1/namespaces/bench/pods", body)
        with tempfile.TemporaryDirectory(prefix="agent-mem-") as tmp:
            root = Path(tmp) / "cgroup"
            wanted = build_tree(root, bodies)
            keys = Path(tmp) / "keys.pem"
            public = private.public_key()
            keys.write_bytes(public.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo,
            ))  # fmt: skip
            command = [
                sys.executable, "-m", "numatopo_cli.main", "agent",
                "--node-name", NODE, "--api-url", str(api.url).rstrip("/"),
                "--cgroup-root", str(root), "--kubelet-state", str(Path(tmp) / "no-state"),
                "--pod-resources-socket", "", "--trusted-keys-file", str(keys),
                "--metrics-address", "127.0.0.1", "--metrics-port", str(free_port()),
                "--resync-seconds", "1",
            ]  # fmt: skip
            started = time.perf_counter()
            agent = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
            try:
                while any(
                    (path / "cpuset.cpus").read_text().strip() != cpus
                    for path, cpus in wanted.items()
                ):
                    if agent.poll() is not None:
                        told = agent.stderr.read() if agent.stderr else ""
                        raise SystemExit(f"the agent ended: {told[-2000:]}")
                    if time.perf_counter() - started > 120:
                        raise SystemExit("the agent did not write every cpuset within 120 s")
                    await asyncio.sleep(0.1)
                enforced = time.perf_counter() - started
                first = proc_status(agent.pid)
                largest = first["VmRSS"]
                until = time.perf_counter() + settle
                while time.perf_counter() < until:
                    largest = max(largest, proc_status(agent.pid)["VmRSS"])
                    await asyncio.sleep(0.05)
                peak = proc_status(agent.pid)["VmHWM"]
            finally:
                agent.terminate()
                agent.wait(10)
    return {
        "seconds to every cpuset written": enforced,
        "RSS once enforced (MiB)": first["VmRSS"] / 1024,
        f"largest RSS over {settle:g} s of resyncs (MiB)": largest / 1024,
        "peak RSS, VmHWM (MiB)": peak / 1024,
    }


IMPORT_CHAIN = """
import importlib, sys
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1])
before, count = rss(), len(sys.modules)
print('(interpreter)', before, count)
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        continue  # an optional import the package tried (not installed)
    now = rss()
    print(name, now - before, len(sys.modules) - count)
    before, count = now, len(sys.modules)
exec(%r)
now = rss()
print('(the rest)', now - before, len(sys.modules) - count)
"""


def import_breakdown() -> list[tuple[str, float, int, float]]:
    """(package, MiB it adds, modules, its own import ms) in the agent's import order."""
    timing = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", AGENT_IMPORT],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    order: list[str] = []
    own_us: collections.Counter[str] = collections.Counter()
    for line in timing.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        fields = line.split("|")
        package = fields[2].strip().split(".")[0]
        own_us[package] += int(fields[0].split(":")[1])
        if package not in order:
            order.append(package)
    third_party = [p for p in order if p not in sys.stdlib_module_names and p not in STARTUP]
    chain = subprocess.run(
        [sys.executable, "-c", IMPORT_CHAIN % AGENT_IMPORT, *third_party],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = []
    stdlib_ms = sum(v for p, v in own_us.items() if p in sys.stdlib_module_names) / 1000
    for line in chain.stdout.splitlines():
        name, kib, modules = line.rsplit(" ", 2)
        ms = stdlib_ms if name == "(the rest)" else own_us.get(name, 0) / 1000
        rows.append((name, int(kib) / 1024, int(modules), ms))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=60)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    if 2 + 2 * args.pods > CPUS:
        parser.error(f"at most {(CPUS - 2) // 2} pods of two one-CPU containers fit")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    measured = asyncio.run(run_agent(args.pods, args.settle))
    print(f"numatopo agent, {CPUS} CPUs, {args.pods} pods x 2 containers")
    for label, value in measured.items():
        print(f"{label:48} {value:8.1f}")
    print()
    print(f"{'imported (in the agent order)':40} {'+MiB':>7} {'modules':>8} {'own ms':>8}")
    for name, mib, modules, ms in import_breakdown():
        print(f"{name:40} {mib:7.1f} {modules:8d} {ms:8.1f}")
    print("(the rest: what the packages above leave to import; its 'own ms' is the whole")
    print(" standard library's import time)")


if __name__ == "__main__":
    main()
