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
             the operator's CPU time and RSS then (`--tracemalloc`: and where its
             memory went, by module, by line, and by the line of numatopo's own code
             under the library that made it)
  burst      once the holder's start-up status writes are done, `--burst` waiting pods
             created 32 at a time: pods decided per second, how long the emulator took
             to create them (one POST p50/p99), creation -> decision p50/p99, the
             operator's CPU per pod, the RSS after; then its CPU per pod counting the
             status writes the burst caused (debounced, and held while the burst goes
             on: they come after it) and their echoes, up to the last of them
             (`--profile FILE`: py-spy's collapsed stacks of the holder meanwhile)
  failover   a second replica on the same Lease; once it has listed everything and
             watched `--standby-warmup` s, kill -9 of the holder: kill -> the next
             pod decided (and the new holder's CPU time meanwhile), in parts: the
             holder's last renewal -> the kill, the kill -> the Lease taken, the Lease
             taken -> the new holder's ledger current -> the pod decided; and the
             Numatopology status PATCHes the new holder sent. `--failovers N`: N in a
             row, each with a fresh standby

kmock looks up the object of every request by comparing it with every stored object and
picks each request's reaction by walking its whole request log: at 30,000 pods the
emulator, not the operator, set the pace. Both are bypassed here (`index_named_objects`,
`find_reactions_directly`), and a LIST is answered in the pages it asks for, as an API
server does (`pages_as_asked`; kmock gives every object in one page); `--plain-emulator`
keeps kmock as it is. kmock also never
changes an object's resourceVersion; here every write gives it a new one, as an API
server does (`version_every_write`, with or without `--plain-emulator`), else the
operator's feeds take a write for a replay.

    .venv/bin/python benchmarks/bench_operator_scale.py [--nodes 100] [--pods 3000]
        [--burst 300] [--no-failover | --failovers 3] [--tracemalloc] [--plain-emulator]
        [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [
    str(REPO),
    str(REPO / "tests"),
    str(REPO / "engine"),
    str(REPO / "operator"),
    str(REPO / "kube"),
]

import aiohttp  # noqa: E402
import kmock  # noqa: E402
from kmock._internal import dsl, k8s_dicts, rendering  # noqa: E402
from tests.operator.conftest import register_resources  # noqa: E402

import signing_keys  # noqa: E402
from numatopo_cli.progress import progress_bar  # noqa: E402
from numatopo_engine import annotations as keys  # noqa: E402
from numatopo_engine.annotations import Assignment, ContainerAssignment  # noqa: E402
from numatopo_engine.cpuset import CPUSet  # noqa: E402
from numatopo_operator.status import BURST_HOLD_PERIODS  # noqa: E402

TOPOLOGIES = REPO / "tests" / "fixtures" / "topologies"
SHAPES = ["h100-nvswitch", "dgx1-v100", "aws-p4d", "pcie-8gpu", "gb200-like", "cpu-2socket-ht"]
NAMESPACE = "numatopo-system"
PODS_PER_NODE_MAX = 10
GIB = 1 << 30
# What the operator logs once every list it starts with is in (`main.freeze_listed_heap`).
WARM = "start-up lists are in"


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
        "metadata": {
            "name": node,
            "uid": f"ntp-{node}",
            "resourceVersion": "1",
            "generation": 1,
        },
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
        body = pod(f"{node}-job-{i}", node, annotations={}, gpus=1 if gpu else 0)
        # Signed as the operator signs what it writes (the test key, given to the operator).
        body["metadata"]["annotations"] = {
            keys.POLICY: "single-numa-node",
            keys.ASSIGNMENT: signing_keys.signed_annotation(body, assignment),
            keys.STATE: "Assigned",
        }
        pods.append(body)
    return pods


def replicas(failovers: int) -> list[str]:
    """The operator processes' names (and pods): the first holder, then one standby for
    each failover, each of which holds the Lease after its own."""
    return [f"op-{chr(ord('a') + i)}" for i in range(failovers + 1)]


def build(api: kmock.KubernetesEmulator, nodes: int, pods: int, failovers: int) -> list[str]:
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
    for name in replicas(failovers):
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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _is_status_patch(request: Any) -> bool:
    return (
        str(request.method).upper().endswith("PATCH")
        and "numatopologies" in request.url.path
        and request.url.path.endswith("/status")
    )


class Versions:
    """The emulator's resourceVersions: one counter for every write, as an API server's
    (`build` stores every object at version 1)."""

    last = 1

    @classmethod
    def next(cls) -> str:
        cls.last += 1
        return str(cls.last)


def version_every_write() -> None:
    """kmock keeps an object's resourceVersion as it was created; a real API server gives
    every write a new one. The operator's feeds skip an object they see again with the
    version they know (a replay, `cluster_feed`), so here a standby skipped every
    Numatopology status the holder wrote after the standby listed: it did none of the
    work those events cost, its view of the statuses went stale, and on taking over it
    wrote about 450 of 1,000 again (the first holder was still writing its start-up
    statuses when the standby listed). Each create and patch gets a new version here,
    and a list says the version it was taken at (kmock's says "..."), which a watch
    starts from (`watch_from_the_replay`). A write of a spec counts a new generation, as
    an API server counts them for objects with a status subresource (the operator's
    feed parses a Numatopology's spec again only for a new one)."""
    create, patch = k8s_dicts.Object.create, k8s_dicts.Object.patch
    serve_list = kmock.KubernetesEmulator._serve_list

    def versioned(changes: Any, generation: int) -> dict[str, Any]:
        changes = dict(changes or {})
        metadata = dict(changes.get("metadata") or {})
        metadata["resourceVersion"] = Versions.next()
        if "spec" in changes:
            metadata["generation"] = generation
        return {**changes, "metadata": metadata}

    def create_versioned(self: Any, changes: Any = None, /, **kwargs: Any) -> None:
        create(self, versioned(changes, 1), **kwargs)

    def patch_versioned(self: Any, changes: Any = None, /, **kwargs: Any) -> None:
        known = (self.raw.get("metadata") or {}).get("generation") or 0
        patch(self, versioned(changes, known + 1), **kwargs)

    async def list_versioned(self: Any, request: Any) -> Any:
        version = str(Versions.last)  # before the objects: a write meanwhile comes again
        listing = await serve_list(self, request)
        return {**listing, "metadata": {**listing.get("metadata", {}), "resourceVersion": version}}

    k8s_dicts.Object.create = create_versioned  # type: ignore[method-assign]
    k8s_dicts.Object.patch = patch_versioned  # type: ignore[method-assign]
    type.__setattr__(kmock.KubernetesEmulator, "_serve_list", list_versioned)


def index_named_objects() -> None:
    """kmock finds the object a request names by comparing it with every object it
    stores: 25 ms a write at 30,000 pods, so the emulator, not the operator, capped a
    burst at a few pods a second. A request that names its object is looked up by its
    key first (the key the emulator stores it under); anything else, or a miss, takes
    kmock's own scan."""
    emulator = kmock.KubernetesEmulator
    scan = emulator._KubernetesEmulator__get_objs

    def get_objs(self: Any, request: Any, strict: bool) -> list[Any]:
        if request.name is not None and (strict or request.namespace is not None):
            key = (request.resource, request.namespace, request.name)
            if key in self._objects:
                return [self._objects[key]]
        return list(scan(self, request, strict))

    emulator._KubernetesEmulator__get_objs = get_objs


def find_reactions_directly() -> None:
    """kmock picks the reaction for a request by asking each reaction's view whether the
    request is among those it sees, which walks the whole request log for every reaction
    that does not take it: 0.2 ms per logged request, quadratic over a run. A view made of
    filters over the emulator holds a request exactly when every filter on the way
    accepts it (the emulator logs every request before it picks a reaction), which is
    asked directly; any other view is asked as kmock asks it."""
    asked = dsl.View.__contains__

    def contains(self: Any, item: object) -> bool:
        if isinstance(item, rendering.Request):
            view = self
            while type(view) in (dsl.Filter, dsl.Priority):
                if type(view) is dsl.Filter and not view.criteria(item):
                    return False
                view = view._source
            if isinstance(view, kmock.KubernetesEmulator):
                return True
        return bool(asked(self, item))

    dsl.View.__contains__ = contains  # type: ignore[method-assign]


def newer(raw: dict[str, Any], version: str | None) -> bool:
    """Whether an object was written after `version` (a list's, `Versions`): what a watch
    from that version is sent."""
    written = str((raw.get("metadata") or {}).get("resourceVersion") or "")
    if not (version and version.isdigit() and written.isdigit()):
        return True
    return int(written) > int(version)


def watch_from_the_replay() -> None:
    """kmock serves a watch by replaying every stored object, then joins the event bus
    of the resource: an object written while the replay is read is in neither, and that
    watcher never sees it (a real API server serves a watch from a version and loses
    nothing). With 30,000 pods the operator reads the replay for seconds, and since it
    decides before that is done, a burst created at once fell into that gap. Here the
    bus is joined before the replay.

    A real API server sends a watch from a list's version only what was written after
    it; kmock replays every object, and the operator read 30,000 pods again (to skip
    each as one it knows) while the burst after its first decision came: a third of
    the CPU the burst was measured to cost. Here a watch from a version (`Versions`)
    replays only the objects written after it (as ADDED, as kmock's replay does); one
    without replays all."""
    emulator = kmock.KubernetesEmulator
    get_objs = emulator._KubernetesEmulator__get_objs
    check = emulator._KubernetesEmulator__check

    async def serve_watch(self: Any, request: Any) -> Any:
        yield b""
        bus = self._buses[request.resource]
        mark = await bus.mark()
        since = request.params.get("resourceVersion")
        async with self._lock:
            objs = [obj for obj in get_objs(self, request, strict=False) if not obj.deleted]
            events = [{"type": "ADDED", "object": obj.raw} for obj in objs if newer(obj.raw, since)]
        for event in events:
            yield event
        async for event in mark:
            metadata = event.get("object", {}).get("metadata", {})
            namespace, name = metadata.get("namespace"), metadata.get("name")
            if check(self, request, request.resource, namespace, name, strict=False):
                yield event

    type.__setattr__(emulator, "_serve_watch", serve_watch)  # read as the watch fallback


def pages_as_asked() -> None:
    """kmock answers a LIST with every object in one page whatever `limit` asks: the
    operator then decoded all 30,000 pods of the benchmark in one piece, hundreds of MiB
    for a moment, which a real API server (500 a page, as the operator asks) never
    makes it hold, and which its RSS kept afterwards. Here a LIST with a `limit` is
    answered page by page."""
    emulator = kmock.KubernetesEmulator
    get_objs = emulator._KubernetesEmulator__get_objs
    whole = emulator._serve_list

    # list -> the objects its first page found: each page is cut from that snapshot
    # (as an API server serves every page from one version), not from a new scan of
    # every stored object (150,000 pods: a scan a page made the emulator the bottleneck).
    snapshots: dict[int, tuple[str, list[Any]]] = {}
    numbers = itertools.count()

    async def serve_list(self: Any, request: Any) -> Any:
        limit = int(request.params.get("limit") or 0)
        if limit <= 0:
            return await whole(self, request)
        token = request.params.get("continue")
        if token:
            number, _, offset = token.partition(":")
            (version, snapshot), start = snapshots.pop(int(number)), int(offset)
        else:
            # The version before the objects, as `version_every_write`'s whole lists
            # say it: a watch from it is sent what was written after the snapshot.
            version = str(Versions.last)
            async with self._lock:
                found = get_objs(self, request, strict=False)
                snapshot, start = [o.raw for o in found if not o.deleted], 0
        metadata = {"resourceVersion": version}
        if start + limit < len(snapshot):
            number = next(numbers)
            snapshots[number] = (version, snapshot)
            metadata["continue"] = f"{number}:{start + limit}"
        return {"metadata": metadata, "items": snapshot[start : start + limit]}

    type.__setattr__(emulator, "_serve_list", serve_list)


class RequestLog:
    """The status PATCHes counted as they come; the log itself trimmed to its tail (a
    long run would hold every request body)."""

    KEEP = 5000

    def __init__(self, api: kmock.KubernetesEmulator) -> None:
        self.api = api
        self.scanned = 0
        self.status_patches = 0

    def tick(self) -> None:
        log: list[Any] = self.api._requests
        self.status_patches += sum(1 for r in log[self.scanned :] if _is_status_patch(r))
        payloads = self.api._payloads
        for requests in [log, *(p._requests for p in payloads)]:
            del requests[: max(0, len(requests) - self.KEEP)]
        self.scanned = len(log)

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(1.0)


def status_patches(log: RequestLog) -> int:
    log.tick()
    return log.status_patches


# No Numatopology status PATCH for this long: the holder's start-up writes are done.
QUIET_SECONDS = 3.0
# After a burst: the writes it caused may wait for a quiet debounce period, at most
# BURST_HOLD_PERIODS of them (2 s each by default), so a longer silence tells they are out.
BURST_QUIET_SECONDS = (1 + BURST_HOLD_PERIODS) * 2.0 + 1.0


async def until_quiet(
    log: RequestLog, timeout: float, *, quiet: float = QUIET_SECONDS, pid: int | None = None
) -> tuple[float, float]:
    """Wait until the holder has written every node's status it writes on taking over
    (at 1,000 nodes, most of them: the stored objects carry none of the fields it
    owns), so that a burst measures the burst, or that a burst caused; returns how long
    that took, and `pid`'s CPU seconds when the last of them was seen (not counting the
    quiet wait after it)."""
    started = time.monotonic()
    count, since = status_patches(log), time.monotonic()
    cpu = cpu_seconds(pid) if pid is not None else 0.0
    while time.monotonic() - since < quiet and time.monotonic() - started < timeout:
        await asyncio.sleep(0.25)
        if status_patches(log) != count:
            count, since = status_patches(log), time.monotonic()
            cpu = cpu_seconds(pid) if pid is not None else 0.0
    return since - started, cpu


# Frames kept per allocation: enough to reach numatopo's caller below lightkube and pydantic.
TRACED_FRAMES = 12
# Run as `python -X tracemalloc=16 -c TRACED report-file operator ...`: the operator, which
# writes where its memory went to the report file on SIGUSR1 (by module, then by line).
TRACED = """
import signal, sys, tracemalloc
from numatopo_cli.main import main

def ours(frames):
    # The newest frame in numatopo's own code: whose call kept what a library made.
    for filename, lineno in frames:
        if "/numatopo_" in filename:
            return f"{filename}:{lineno}"
    return "(no numatopo frame)"

def report(*_):
    snapshot = tracemalloc.take_snapshot()
    with open(sys.argv[1], "w") as out:
        for key in ("filename", "lineno"):
            stats = snapshot.statistics(key)
            out.write(f"by {key}: {sum(s.size for s in stats) / 2**20:.0f} MiB traced\\n")
            for stat in stats[:30]:
                out.write(f"{stat.size / 2**20:8.1f} MiB {stat.count:9d} {stat.traceback}\\n")
        callers = {}
        # The raw traces (domain, size, frames newest first, depth): a Trace object
        # per allocation made this take minutes at 30,000 pods.
        for _, size, frames, *_ in snapshot.traces._traces:
            where = ours(frames)
            total, count = callers.get(where, (0, 0))
            callers[where] = (total + size, count + 1)
        out.write("by the numatopo line that made it (newest frame of ours)\\n")
        for where, (size, count) in sorted(callers.items(), key=lambda i: -i[1][0])[:40]:
            out.write(f"{size / 2**20:8.1f} MiB {count:9d} {where}\\n")

signal.signal(signal.SIGUSR1, report)
sys.exit(main(sys.argv[2:]))
"""


async def start(
    name: str, config: Path, log: Any, traced: Path | None = None
) -> asyncio.subprocess.Process:
    numatopo = Path(sys.executable).with_name("numatopo")
    command = (
        [str(numatopo)]
        if traced is None
        else [sys.executable, "-X", f"tracemalloc={TRACED_FRAMES}", "-c", TRACED, str(traced)]
    )
    return await asyncio.create_subprocess_exec(
        *command,
        "operator",
        "--lease-name=numatopo",
        f"--pod-name={name}",
        f"--pod-namespace={NAMESPACE}",
        "--listen-host=127.0.0.1",
        "--extender-insecure-plain-http",
        "--extender-port=0",
        "--metrics-port=0",
        env={
            **os.environ,
            "KUBECONFIG": str(config),
            "NUMATOPO_SIGNING_KEY_FILE": signing_keys.KEY_FILE,
        },
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )


async def profile_start(pid: int, out: Path | None) -> asyncio.subprocess.Process | None:
    """py-spy sampling the holder from here until `profile_stop` (its collapsed stacks:
    one line per stack and its samples, for flamegraph tools or a sort by count)."""
    if out is None:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        raise SystemExit(f"--profile needs py-spy next to {sys.executable} (the test extra)")
    process = await asyncio.create_subprocess_exec(
        str(spy), "record", "--pid", str(pid), "--rate", "1000", "--format", "raw", "--gil",
        "--output", str(out), "--nonblocking",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    await asyncio.sleep(1.0)  # attached before the burst starts
    return process


async def profile_stop(process: asyncio.subprocess.Process | None, out: Path | None) -> None:
    if process is None:
        return
    process.send_signal(signal.SIGINT)
    await process.wait()
    print(f"burst: the holder's stacks while it decided (py-spy, collapsed): {out}")


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


# The new holder's log lines that mark its take-over (`leadership`, `handover`).
ACQUIRED = "holds Lease"
LEDGER_CURRENT = ("the ledger as listed and watched is current", "ledger rebuilt from")
POD_LISTED = "numatopo_operator.pod_feed: listed"
PROBE_ANNOTATIONS = {keys.POLICY: "single-numa-node"}


def _micro_time(text: str) -> float:
    """A Lease's MicroTime (UTC) as a Unix time."""
    parsed = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


def _logged_at(line: str) -> float:
    """The Unix time of an operator log line (`%(asctime)s`: local time, milliseconds)."""
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def lease_spec(api: kmock.KubernetesEmulator) -> dict[str, Any]:
    found = api.objects["coordination.k8s.io/v1/leases", NAMESPACE, "numatopo"]
    return dict(found.raw.get("spec") or {})


def ledger_current_at(log: Path) -> float | None:
    """When the new holder's ledger was current after its (first) acquisition."""
    acquired = False
    for line in log.read_text(errors="replace").splitlines():
        acquired = acquired or ACQUIRED in line
        if acquired and any(mark in line for mark in LEDGER_CURRENT):
            return _logged_at(line)
    return None


@dataclass
class Cluster:
    """What a failover works with: the emulator, its client, the operator processes."""

    api: kmock.KubernetesEmulator
    session: aiohttp.ClientSession
    url: str
    nodes: list[str]
    tmp: Path
    config: Path
    logs: dict[str, Any]
    processes: dict[str, asyncio.subprocess.Process]
    requests_log: RequestLog
    args: argparse.Namespace


async def decided_right_after(cluster: Cluster, name: str, node: str) -> float | None:
    """Create a pod now: creation -> decided (None: not within the timeout)."""
    created = time.monotonic()
    await create(cluster.session, cluster.url, pod(name, node, annotations=PROBE_ANNOTATIONS))
    seen = await until_decided(cluster.api, [name], cluster.args.timeout)
    return seen[name] - created if seen else None


async def failover(cluster: Cluster, *, holder: str, turn: int) -> str | None:
    """One failover: a fresh standby, warm, then kill -9 of `holder`; returns the new
    holder (None when nothing was decided). Printed: kill -> the next pod decided, in
    three parts: the holder's last renewal -> the kill (the kill's phase in the renewal
    period), the kill -> the Lease taken (the new holder's `acquireTime`; the lease
    duration counts from the standby's sight of that renewal), the Lease taken -> its
    ledger current (its log) -> the pod decided (seen in the store)."""
    api, session, url, args = cluster.api, cluster.session, cluster.url, cluster.args
    tmp, logs, processes = cluster.tmp, cluster.logs, cluster.processes
    standby = replicas(args.failovers)[turn + 1]
    log = tmp / f"{standby}.log"
    processes[standby] = await start(standby, cluster.config, logs[standby])
    standby_started = time.monotonic()
    # Warm: the standby has listed everything (its log says so), then watched.
    warm_by = time.monotonic() + args.timeout
    while time.monotonic() < warm_by:
        text = log.read_text(errors="replace")
        if WARM in text and POD_LISTED in text:
            break
        await asyncio.sleep(0.5)
    warm_patches = status_patches(cluster.requests_log)
    print(f"standby {standby}: warm {time.monotonic() - standby_started:.1f} s after its start")
    await asyncio.sleep(args.standby_warmup)
    standby_cpu = cpu_seconds(processes[standby].pid)
    patches_before = status_patches(cluster.requests_log)
    print(
        f"status PATCHes so far: {patches_before}, {patches_before - warm_patches} of them "
        "while the standby was warm"
    )
    renewed = _micro_time(str(lease_spec(api).get("renewTime")))
    processes[holder].send_signal(signal.SIGKILL)
    killed, killed_at = time.monotonic(), time.time()
    probe = f"probe-failover-{turn}"
    node = cluster.nodes[(turn + 1) % len(cluster.nodes)]
    await create(session, url, pod(probe, node, annotations=PROBE_ANNOTATIONS))
    seen = await until_decided(api, [probe], args.timeout)
    if not seen:
        print(f"failover {turn + 1}: nothing decided (log: {log})")
        return None
    # The new holder judges the waiting pods first, then every assigned one: a pod that
    # comes now arrives during that pass.
    late_node = cluster.nodes[(turn + 2) % len(cluster.nodes)]
    late_decided = await decided_right_after(cluster, f"probe-late-{turn}", late_node)
    decided_at = killed_at + seen[probe] - killed
    spec = lease_spec(api)
    taken = _micro_time(str(spec.get("acquireTime")))
    current = ledger_current_at(log)
    parts = (
        f"last renewal {killed_at - renewed:.2f} s before the kill; "
        f"kill -> Lease taken {taken - killed_at:.2f} s ({taken - renewed:.2f} s after that "
        f"renewal, lease duration {spec.get('leaseDurationSeconds')} s); "
    )
    if current is not None:
        parts += (
            f"Lease taken -> ledger current {current - taken:.2f} s -> "
            f"decided {decided_at - current:.2f} s"
        )
    else:
        parts += f"Lease taken -> decided {decided_at - taken:.2f} s"
    print(
        f"failover {turn + 1}: next pod decided {seen[probe] - killed:.1f} s after kill -9 of "
        f"the holder ({parts}), {cpu_seconds(processes[standby].pid) - standby_cpu:.1f} s "
        "of the new holder's CPU"
    )
    if late_decided is not None:
        print(
            f"failover {turn + 1}: a pod created once that one was decided (while the new "
            f"holder judges the pods it took over) decided {late_decided:.2f} s after its "
            "creation"
        )
    await asyncio.sleep(5.0)
    sent = status_patches(cluster.requests_log) - patches_before
    print(
        f"failover {turn + 1}: the new holder sent {sent} "
        f"Numatopology status PATCHes in its first {time.monotonic() - killed:.0f} s "
        f"({args.nodes} nodes); RSS {rss_mib(processes[standby].pid):.0f} MiB"
    )
    return standby


async def run(args: argparse.Namespace) -> None:
    version_every_write()
    if not args.plain_emulator:
        index_named_objects()
        find_reactions_directly()
        watch_from_the_replay()
        pages_as_asked()
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        register_resources(api)
        requests_log = RequestLog(api)
        if not args.plain_emulator:
            requests_log.start()
        url = str(api.url).rstrip("/")
        t = time.monotonic()
        nodes = build(api, args.nodes, args.pods, args.failovers)
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
            logs = {name: (tmp / f"{name}.log").open("wb") for name in replicas(args.failovers)}
            started = time.monotonic()
            traced = tmp / "op-a.memory" if args.tracemalloc else None
            processes = {"op-a": await start("op-a", config, logs["op-a"], traced)}
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
                if traced is not None:
                    processes["op-a"].send_signal(signal.SIGUSR1)
                    await asyncio.sleep(args.timeout / 10)
                    print(f"start-up: where the memory went (tracemalloc): {traced}")
                quiet_after, _ = await until_quiet(requests_log, args.timeout)
                print(
                    f"start-up: its status writes done {quiet_after:.1f} s after the first "
                    f"decision ({status_patches(requests_log)} status PATCHes in all), "
                    f"{cpu_seconds(pid):.1f} s of its CPU then"
                )
                burst = [f"burst-{i}" for i in range(args.burst)]
                created: dict[str, float] = {}
                posts: list[float] = []
                profiler = await profile_start(pid, args.profile)
                patches_before = status_patches(requests_log)
                cpu_before = cpu_seconds(pid)
                t0 = time.monotonic()
                in_flight = asyncio.Semaphore(args.burst_concurrency)

                async def create_one(i: int, name: str) -> None:
                    body = pod(
                        name, nodes[i % len(nodes)], annotations={keys.POLICY: "single-numa-node"}
                    )
                    async with in_flight:
                        sent = time.monotonic()
                        await create(session, url, body)
                        created[name] = time.monotonic()
                        posts.append(created[name] - sent)

                # Created as a controller creates a job's pods: many requests in flight.
                creating_all = asyncio.gather(*(create_one(i, n) for i, n in enumerate(burst)))
                seen, _ = await asyncio.gather(
                    until_decided(api, burst, args.timeout), creating_all
                )
                creating = max(created.values()) - t0
                if seen:
                    latencies = sorted(seen[n] - created[n] for n in seen)
                    span = max(seen.values()) - t0
                    print(
                        f"burst: {len(seen)}/{len(burst)} decided, {len(seen) / span:.0f} pods/s "
                        f"(the emulator took {creating:.2f} s to create them, "
                        f"{len(burst) / creating:.0f}/s; "
                        f"one POST p50 {statistics.median(posts) * 1000:.0f} ms "
                        f"p99 {percentile(posts, 0.99) * 1000:.0f} ms), "
                        f"creation->decision p50 {statistics.median(latencies):.2f} s "
                        f"p99 {percentile(latencies, 0.99):.2f} s; "
                        f"{(cpu_seconds(pid) - cpu_before) * 1000 / len(seen):.1f} ms of the "
                        f"operator's CPU per pod; RSS {rss_mib(pid):.0f} MiB"
                    )
                    # The Numatopology status writes the burst caused come after it (at
                    # most one per node per debounce period, held while the burst goes
                    # on: `status.BURST_HOLD_PERIODS`), and their watch events.
                    decided_at, waited_from = max(seen.values()), time.monotonic()
                    last_write, cpu_then = await until_quiet(
                        requests_log, args.timeout, quiet=BURST_QUIET_SECONDS, pid=pid
                    )
                    print(
                        f"burst: {(cpu_then - cpu_before) * 1000 / len(seen):.1f} ms "
                        "of the operator's CPU per pod counting the status writes it caused "
                        f"({status_patches(requests_log) - patches_before} Numatopology status "
                        f"PATCHes, the last {waited_from + last_write - decided_at:.1f} s "
                        f"after the last decision; none for {BURST_QUIET_SECONDS:.0f} s then)"
                    )
                await profile_stop(profiler, args.profile)
                if args.no_failover:
                    return
                cluster = Cluster(
                    api, session, url, nodes, tmp, config, logs, processes, requests_log, args
                )
                holder: str | None = "op-a"
                for turn in range(args.failovers):
                    if holder is None:
                        return
                    holder = await failover(cluster, holder=holder, turn=turn)
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
    parser.add_argument(
        "--burst-concurrency", type=int, default=32, help="pod creations in flight at once"
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--standby-warmup",
        type=float,
        default=10.0,
        help="seconds the standby watches, once it has listed everything, before the kill",
    )
    parser.add_argument("--no-failover", action="store_true")
    parser.add_argument(
        "--failovers",
        type=int,
        default=1,
        help="failovers in a row, each with a fresh standby that kills the holder before it",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="run the first replica under tracemalloc and report its memory after start-up",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the holder with py-spy during the burst; its collapsed stacks go here",
    )
    parser.add_argument(
        "--plain-emulator",
        action="store_true",
        help="kmock as it is (no keyed lookups, no trimmed request log): the baseline",
    )
    args = parser.parse_args()
    if args.no_failover:
        args.failovers = 0
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
