"""Extender latency: filter + prioritize over real HTTP vs the judging alone vs counts.

One scheduling cycle of a node-cache-capable kube-scheduler is one `POST /filter` with
ExtenderArgs {Pod, NodeNames} and one `POST /prioritize` with the nodes that passed.
This runs the operator's own extender app (aiohttp, on a loopback port) over a ledger
holding the nodes of `bench_engine.build_cluster` (a realistic fleet: fixture machines
and the Alibaba node list's models, every node with its own name, GPU UUIDs and bus
ids, and a fresh heartbeat; seeded mixed occupancy). kube-scheduler's side runs in a
process of its own, as in a cluster (`scheduler_client.py`, driven over a pipe: "run
the mix N times", answered with each cycle's latency): it encodes each cycle's filter
body, parses the filter answer and encodes the prioritize body from the nodes that
passed, over one keep-alive connection. Every side must agree on which nodes fit
(checked per pod before timing).

As in production by default: the extender serves HTTPS and asks for a client
certificate (`extender_tls.RotatingContext`), and the client shows one, all three made
at start by `bench_pki` (a throwaway CA; `--plain-http` for plain HTTP); and each cycle
sends the next `--send` nodes of the cluster, starting where the last cycle stopped
(kube-scheduler's percentageOfNodesToScore walk), so consecutive cycles meet different
nodes. `--fixed` sends the same every-k-th nodes each cycle instead (the shape of the
figures before issue 22's item 4). `--book` books the pod on each cycle's best-scored
node, as its bind would (`Booker`): later cycles meet nodes that changed. Per cycle,
in the same run:

  * `http ms`: the cycle over HTTP, as the extender pays it: with `--cpu`, this
    process's CPU time while the client runs the mix (the server and its engine
    thread; the client's encoding and parsing are not counted), else the wall time of
    the cycle as the client sees it; `p99 ms`: the 99th percentile of one cycle's wall
    time as the client sees it, over every cycle of the regime's runs (--repeat times
    the pod mix), on whatever load the machine has;
  * `judge ms`: what the cycle's filter runs of the engine, on the operator's own
    engine (`runtime.decisions`): `extender.candidates` (the ledger's frozen states and
    the candidates' staleness) and `extender.judge_candidates` (scores, refusals, node
    rank), on the requests the extender reads from the same pods; prioritize reuses
    filter's ranks for the same pod. `http/judge` is the HTTP/JSON layer's cost (goal:
    at most 1.5x);
  * `count ms`: a topology-blind extender's filter at the same call shape
    (`count_only_filter`): each sent node's state from the same ledger, its O(1) free
    CPU, GPU and memory counters against the pod's, the nodes that pass and why the
    others do not. `judge/count` has a goal of at most 3x. `list ms` is
    `bench_engine.count_only_pass` over a prepared list of the same nodes' states (no
    names, no result), for comparison with earlier figures.

Within a regime the HTTP, judging and counting runs take turns (each the best of
`--repeat`), so that load that comes and goes on a shared machine meets all three.

Regimes, each its own row: `new engine` starts every cycle with a fresh
`allocation.Engine` (hardware tables, plans and verdicts built again: a restarted
operator); `first pod` keeps the hardware tables but no plan or verdict (the first pod
of its kind on a running operator); `warm` (after one walk round the cluster, untimed)
has every row and verdict a cycle needs at hand (the next replicas of the same job,
with `--book` less the nodes booked since). `--warm` runs that regime alone. `--send N`:
N of the cluster's nodes per cycle (kube-scheduler sends about 500 of 5,000).

Issue 22's goals (item 4), at 500 of 5,000 nodes, warm: `judge/count` at most 3x and
`http/judge` at most 1.5x, both read from one run of

    .venv/bin/python benchmarks/bench_extender.py --nodes 5000 --send 500 --repeat 5 --cpu

(figures in README's Benchmarks and docs/benchmarks.md). Other uses:

    .venv/bin/python benchmarks/bench_extender.py [--nodes 1000 5000] [--send 500] [--repeat 3]
    .venv/bin/python benchmarks/bench_extender.py --nodes 5000 --profile   # where time goes
    NUMATOPO_WORKLOAD_MIX=1x4:4,2x8:2,4x16:2,8x32:2 .venv/bin/python benchmarks/bench_extender.py
    .venv/bin/python benchmarks/bench_extender.py --identities --nodes 1000 5000 --send 500 --cpu
    NUMATOPO_WORKLOAD_MIX=... .venv/bin/python benchmarks/bench_extender.py --judge --nodes 1000 \
        --send 500 --repeat 7   # CPU time of the decision alone (rank and host counts included)

`--identities` runs the operator's extender over the fleet as built (every node with its
own name, GPU UUIDs and bus ids) and over the same fleet without them (same shapes and
bookings), alternately in one run: the named/none ratio has a goal of at most 1.2x.

`--cpu` reads this process's CPU time (every thread: the server, the engine thread;
the client is another process) instead of wall time: on a loaded machine, wall time is
mostly waiting for a core. `--profile` prints a cProfile of the server side (the event
loop's thread and the engine thread) over one warm mix (NUMATOPO_PROFILE_ORDER=cumulative
sorts it by time under each call). `--judge` reads CPU time, not
wall time, so that a shared machine's other load counts less; run it from two
checkouts back to back (PYTHONPATH at each one's source roots) to compare the decision
time of two versions of the rank.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import math
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "engine"), str(REPO / "operator"), str(REPO / "benchmarks")]

import numpy as np  # noqa: E402
from aiohttp import web  # noqa: E402

import bench_pki  # noqa: E402
from bench_engine import MIX, build_cluster, count_only_pass  # noqa: E402
from numatopo_engine import annotations as keys  # noqa: E402
from numatopo_engine import pod_request  # noqa: E402
from numatopo_engine.allocation import (  # noqa: E402
    Engine,
    allocate,
    evaluate_many,
    group_by_shape,
)
from numatopo_engine.errors import UnsatisfiableError  # noqa: E402
from numatopo_engine.model import NumatopologySpec  # noqa: E402
from numatopo_engine.request import PodRequest  # noqa: E402
from numatopo_engine.state import NodeState  # noqa: E402
from numatopo_operator import extender  # noqa: E402
from numatopo_operator.extender_tls import RotatingContext, TlsFiles  # noqa: E402
from numatopo_operator.runtime import Runtime  # noqa: E402
from numatopo_operator.settings import OperatorSettings  # noqa: E402
from scheduler_client import Rotation  # noqa: E402

Nodes = list[tuple[NumatopologySpec, NodeState]]


def pod_manifest(request: PodRequest, uid: str) -> dict[str, Any]:
    """The Pod kube-scheduler would send for `request` (one container, limits = requests)."""
    containers = []
    for container in request.containers:
        resources: dict[str, str] = {
            "cpu": f"{container.cpu_milli}m",
            "memory": str(container.memory_bytes),
        }
        if container.gpus:
            resources["nvidia.com/gpu"] = str(container.gpus)
        containers.append(
            {
                "name": container.name,
                "image": "registry.example.com/train:1",
                "resources": {"requests": resources, "limits": resources},
            }
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": request.name,
            "namespace": request.namespace,
            "uid": uid,
            "annotations": {keys.POLICY: request.options.policy.value},
        },
        "spec": {"schedulerName": "numatopo-scheduler", "containers": containers},
    }


def runtime_over(nodes: Nodes) -> tuple[Runtime, list[str]]:
    """An operator runtime whose ledger books exactly what `nodes` book, ready to decide."""
    # NUMATOPO_WORKLOAD_MIX pins the mix the rank packs for (else none is learned here).
    runtime = Runtime(OperatorSettings(workload_mix=os.environ.get("NUMATOPO_WORKLOAD_MIX", "")))
    names = []
    for index, (spec, state) in enumerate(nodes):
        name = f"node-{index}"
        runtime.ledger.set_topology(name, spec)
        for key, assignment in state.assignments.items():
            runtime.ledger.reserve(name, key, assignment)
        names.append(name)
    for event in (runtime.role_known, runtime.active, runtime.indexed, runtime.ledger_current):
        event.set()
    # Every exporter beats: the extender ages each candidate's heartbeat per cycle.
    now = time.time()
    for name in names:
        runtime.ledger.see_freshness(name, stale=None, heartbeat=now, gpu_mode=None)
    return runtime, names


def count_only_filter(runtime: Runtime, names: list[str], request: PodRequest) -> list[str]:
    """A topology-blind extender's filter at the extender's call shape (see the module
    docstring): the sent nodes that pass, with a reason for each of the others."""
    container = request.containers[0]
    cpus, gpus, memory = container.cpu_milli // 1000, container.gpus, container.memory_bytes
    state_of = runtime.ledger.state
    passed: list[str] = []
    failed: dict[str, str] = {}
    for node in names:
        state = state_of(node)
        if state is None:
            failed[node] = "no Numatopology"
        elif state.free_gpu_count() < gpus:
            failed[node] = "Insufficient GPUs"
        elif state.free_cpu_count() < cpus:
            failed[node] = "Insufficient cpu"
        elif state.free_memory_total() < memory:
            failed[node] = "Insufficient memory"
        else:
            passed.append(node)
    return passed


def engine_cycle(nodes: Nodes, request: PodRequest, engine: Engine) -> int:
    """What filter+prioritize need from the engine: a score or a refusal per node, the
    nodes grouped by hardware shape and decided in bulk as the extender does."""
    feasible = 0
    for group in group_by_shape(nodes):
        outcomes = evaluate_many(
            group.topology, group.states, request, checked=False, engine=engine
        )
        feasible += sum(1 for outcome in outcomes if isinstance(outcome, int))
    return feasible


class Run(NamedTuple):
    """Per cycle of a run of the mix: the wall seconds the client saw, how many nodes
    passed filter, where its nodes started in the walk, and the best-scored node."""

    latencies: list[float]
    passed: list[int]
    starts: list[int]
    chosen: list[str]


class SchedulerClient:
    """kube-scheduler's side of the calls in a process of its own (`scheduler_client.py`,
    driven over a pipe): its CPU, encoding bodies and parsing answers, is not the
    extender's, and this process's CPU time is then the server's and its engine thread's."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> SchedulerClient:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(REPO / "benchmarks" / "scheduler_client.py"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 24,
        )
        return cls(process)

    async def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None
        assert stdout is not None
        stdin.write(json.dumps(command).encode() + b"\n")
        await stdin.drain()
        line = await stdout.readline()
        if not line:
            raise RuntimeError("the scheduler client ended (see its error above)")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def target(self, url: str, pods: list[dict[str, Any]], shape: Shape) -> int:
        """Sets up an extender to call; its number for `cycles`."""
        pki = shape.pki
        tls = None
        if pki is not None and not shape.plain:
            tls = {"ca": str(pki.ca), "cert": str(pki.client_cert), "key": str(pki.client_key)}
        command = {"url": url, "pods": pods, "names": shape.names, "send": shape.send}
        answer = await self._ask(command | {"tls": tls})
        return int(answer["target"])

    async def cycles(self, target: int, times: int = 1) -> Run:
        """The pod mix `times` over (see `Run`)."""
        answer = await self._ask({"run": target, "times": times})
        return Run(answer["latencies"], answer["passed"], answer["starts"], answer["chosen"])

    async def timed(self, target: int, latencies: list[float], booker: Booker) -> float:
        """One run of the mix, timed as `CLOCK` says: this process's CPU (the server and
        its engine thread) or the client's wall time; its cycles' latencies added, its
        chosen nodes then booked (`booker`, outside the timing)."""
        clock = CLOCK[0]
        started = clock()
        run = await self.cycles(target)
        took = clock() - started
        latencies += run.latencies
        booker.book(run.chosen)
        return sum(run.latencies) if clock is time.perf_counter else took

    async def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        await self.process.wait()


def new_engine(runtime: Runtime) -> None:
    """A restarted operator: fresh memo tables (each node keeps its row until it
    changes, as in production)."""
    # The Runtime is frozen against rebinding (kopf's memo copies); no copy exists here.
    object.__setattr__(runtime, "decisions", Engine())


def first_pods(runtime: Runtime) -> None:
    """The next pods are each the first of their kind: the hardware tables stay, no
    plan or verdict does."""
    old, fresh = runtime.decisions, Engine()
    fresh.tables = old.tables
    fresh.layouts = old.layouts
    fresh.free_columns = old.free_columns
    object.__setattr__(runtime, "decisions", fresh)


PROFILE_ORDER = ["tottime"]  # NUMATOPO_PROFILE_ORDER=cumulative: by time under each call
CLOCK = [time.perf_counter]  # `--cpu`: this process's CPU time, every thread's


def clocked(
    run: Callable[[], list[Any]],
    booker: Booker,
    chosen: Callable[[list[Any]], list[str]] = list,
) -> Callable[[], Awaitable[float]]:
    """`run` as a timed run for `best_of`, on `CLOCK`; the nodes it chose (`chosen` of
    what it returned, untimed) then booked."""

    async def timed() -> float:
        clock = CLOCK[0]
        started = clock()
        answers = run()
        took = clock() - started
        booker.book(chosen(answers))
        return took

    return timed


async def best_of(
    repeat: int, timed: Callable[[], Awaitable[float]], before: Callable[[], object]
) -> float:
    """Best time of `repeat` runs, with the collector paused as `timeit` does."""
    times = []
    for _ in range(repeat):
        before()
        gc.collect()
        gc.disable()
        try:
            times.append(await timed())
        finally:
            gc.enable()
    return min(times)


Pods = list[dict[str, Any]]
Scores = dict[str, int]


@dataclass
class Shape:
    """What each cycle sends and how: `names` walked `send` at a time (None: all of them
    each cycle), over mutual TLS unless `plain`; `book`: each cycle's chosen node takes
    its pod (see `Booker`)."""

    names: list[str]
    send: int | None
    plain: bool = False
    book: bool = False
    pki: bench_pki.Pki | None = None


async def serve(
    runtime: Runtime, client: SchedulerClient, pods: Pods, nodes: Nodes, shape: Shape
) -> tuple[int, web.AppRunner]:
    """The operator's extender app over `runtime` on a loopback port, over mutual TLS as
    in production (`extender_tls`, unless `shape.plain`), set up as a target of
    `client` (its number), once it is checked to pass, per pod, as many of the nodes
    each cycle sends (`nodes`: every name's topology and state) as the engine alone
    does: every side must agree on which nodes fit, or the comparison means nothing."""
    server = web.AppRunner(extender.build_app(runtime), access_log=None)
    await server.setup()
    tls = None
    if not shape.plain:
        assert shape.pki is not None
        files = TlsFiles(str(shape.pki.server_cert), str(shape.pki.server_key), str(shape.pki.ca))
        tls = RotatingContext(files).listening
    await web.TCPSite(server, "127.0.0.1", 0, ssl_context=tls).start()
    port = server.addresses[0][1]
    url = f"{'http' if tls is None else 'https'}://127.0.0.1:{port}"
    target = await client.target(url, pods, shape)
    run = await client.cycles(target)
    sent = Rotation(shape.names, shape.send).send
    for request, passed, start in zip(MIX, run.passed, run.starts, strict=True):
        taken = [nodes[(start + i) % len(nodes)] for i in range(sent)]
        assert passed == engine_cycle(taken, request, Engine()), request.name
    return target, server


class Booker:
    """`--book`: each cycle's chosen node takes the pod, as its bind would book it, so
    that later cycles meet the nodes that changed (their rows and verdicts new).

    The bookings of a run of the mix are made after it, outside the timing: a run's
    cycles send disjoint nodes (checked), so each node is booked before any cycle
    sends it again, as if booked right after its own cycle."""

    def __init__(self, runtime: Runtime, shape: Shape) -> None:
        self.runtime = runtime
        self.on = shape.book
        self.booked = 0
        if self.on and (shape.send is None or len(MIX) * shape.send > len(shape.names)):
            raise SystemExit("--book needs --send N with the mix's cycles sending disjoint nodes")

    def book(self, chosen: list[str]) -> None:
        ledger = self.runtime.ledger
        for request, node in zip(MIX, chosen, strict=True) if self.on else ():
            spec, state = ledger.topology(node), ledger.state(node)
            if not node or spec is None or state is None:
                continue
            try:
                decision = allocate(spec, state, request, node)
            except UnsatisfiableError:
                continue
            self.booked += 1
            ledger.reserve(node, f"bench/booked-{self.booked}", decision.assignment)


def judge_mix(runtime: Runtime, shape: Shape, pods: Pods) -> Callable[[], list[Scores]]:
    """The mix judged as filter judges it, on the operator's own engine (no HTTP), each
    cycle's nodes walked as the client walks them; each cycle's node scores (`best` of
    them is kube-scheduler's choice, made on its side, so not timed). The requests are
    read from the pods as the extender reads them (`pod_request`, with the operator's
    resource names), so both judge the same plans."""
    rotation = Rotation(shape.names, shape.send)
    resources = runtime.settings.resources
    requests = [pod_request.request_from_pod(pod, resources) for pod in pods]

    def run() -> list[Scores]:
        scored = []
        for request in requests:
            _, names = rotation.next()
            taken = extender.candidates(runtime, names, request.key)
            scored.append(extender.judge_candidates(request, taken, runtime.decisions).scores)
        return scored

    return run


def best_nodes(scored: list[Scores]) -> list[str]:
    """Each cycle's best-scored node ("" where none passed)."""
    return [max(scores, key=scores.__getitem__, default="") for scores in scored]


async def profiled(client: SchedulerClient, target: int, runtime: Runtime, walk: int) -> None:
    """cProfile of the server side over one warm mix (after `walk` runs of it): the event
    loop's thread, then the engine thread's, each on its own thread's CPU time (waiting
    for a core or for the other thread is not counted)."""
    await client.cycles(target, times=walk)
    loop_profile = cProfile.Profile(time.thread_time)
    engine_profile = cProfile.Profile(time.thread_time)
    runtime.engine.submit(engine_profile.enable).result()
    loop_profile.enable()
    await client.cycles(target)
    loop_profile.disable()
    runtime.engine.submit(engine_profile.disable).result()
    for title, profile in (("event loop", loop_profile), ("engine thread", engine_profile)):
        print(f"-- {title}")
        pstats.Stats(profile).sort_stats(PROFILE_ORDER[0]).print_stats(30)


def sent_shape(
    names: list[str], nodes: Nodes, send: int | None, how: Options
) -> tuple[Shape, Nodes]:
    """What each cycle sends, and those names' nodes in the same order: by default
    kube-scheduler's walk (`send` at a time, each cycle where the last stopped); with
    `how.fixed`, the same every-k-th `send` nodes each cycle (the older benchmarks)."""
    if how.fixed and send is not None:
        step = max(1, len(names) // send)
        names, nodes, send = names[::step][:send], nodes[::step][:send], None
    return Shape(names, send, how.plain, how.book, how.pki), nodes


def walk_of(shape: Shape) -> int:
    """Runs of the mix that send every node at least once (the walk once round)."""
    return -(-len(shape.names) // (shape.send or len(shape.names)))


async def measure(count: int, seed: int, repeat: int, send: int | None, how: Options) -> None:
    nodes = build_cluster(count, seed)
    runtime, names = runtime_over(nodes)
    shape, nodes = sent_shape(names, nodes, send, how)
    booker = Booker(runtime, shape)
    pods = [pod_manifest(request, f"uid-{i}") for i, request in enumerate(MIX)]
    rows: list[tuple[str, float, float, float, float]] = []
    client = await SchedulerClient.start()
    server: web.AppRunner | None = None
    try:
        target, server = await serve(runtime, client, pods, nodes, shape)
        walk = walk_of(shape)
        if how.profile:
            await profiled(client, target, runtime, walk)
            return
        counts, lists = Rotation(shape.names, shape.send), Rotation(nodes, shape.send)

        def count_mix() -> list[str]:
            for request in MIX:
                count_only_filter(runtime, counts.next()[1], request)
            return []

        def list_mix() -> list[str]:
            for request in MIX:
                count_only_pass(lists.next()[1], request)
            return []

        idle = Booker(runtime, Shape([], None))
        listing = await best_of(repeat, clocked(list_mix, idle), lambda: None)
        latencies: list[float] = []
        regimes = (
            ("new engine", lambda: new_engine(runtime)),
            ("first pod", lambda: first_pods(runtime)),
            ("warm", lambda: None),
        )
        for regime, before in regimes[2:] if how.warm else regimes:
            if regime == "warm":
                # Warm: each pod has met every node its cycles will send (the walk once round).
                await client.cycles(target, times=walk)
            latencies.clear()
            # HTTP, judging and counting take turns run by run, so that load that comes
            # and goes on a shared machine meets the three alike.
            judge = clocked(judge_mix(runtime, shape, pods), booker, best_nodes)
            best = [math.inf] * 3
            for _ in range(repeat):
                runs = (
                    (lambda: client.timed(target, latencies, booker), before),
                    (judge, before),
                    (clocked(count_mix, idle), lambda: None),
                )
                for at, (timed, ready) in enumerate(runs):
                    best[at] = min(best[at], await best_of(1, timed, ready))
            http, judged, counting = best
            p99 = float(np.percentile(latencies, 99))
            rows.append((regime, http, judged, counting, p99))
    finally:
        await client.close()
        if server is not None:
            await server.cleanup()
    cycles = len(MIX)
    sent = len(shape.names) if shape.send is None else shape.send
    for regime, http, judged, counting, p99 in rows:
        print(
            f"{count:>6} {sent:>5} {regime:>10} {1e3 * http / cycles:>8.2f} "
            f"{1e3 * judged / cycles:>9.2f} {http / judged:>10.2f} "
            f"{1e3 * counting / cycles:>9.3f} {judged / counting:>11.1f} "
            f"{1e3 * listing / cycles:>8.3f} {1e3 * p99:>8.1f}"
        )
    if booker.on:
        print(f"{'':>12} {booker.booked} pods booked on the nodes their cycles chose")


Side = tuple[Runtime, Shape, int, Booker]
"""One fleet's extender: its runtime, what its cycles send, its number with the client,
and what books its cycles' choices."""


async def compare_identities(
    count: int, seed: int, repeat: int, send: int | None, how: Options
) -> None:
    """The operator's decisions over named nodes (their own names, GPU UUIDs and bus ids)
    against the same fleet without identities (same shapes, same bookings), in one run:
    an extender app per fleet, the same pods, each regime timed on both alternately."""
    pods = [pod_manifest(request, f"uid-{i}") for i, request in enumerate(MIX)]
    sides: list[Side] = []
    servers: list[web.AppRunner] = []
    client = await SchedulerClient.start()
    try:
        for named in (True, False):
            nodes = build_cluster(count, seed, names=named)
            runtime, names = runtime_over(nodes)
            shape, nodes = sent_shape(names, nodes, send, how)
            target, server = await serve(runtime, client, pods, nodes, shape)
            servers.append(server)
            sides.append((runtime, shape, target, Booker(runtime, shape)))
        for regime, fresh in (("new engine", True), ("warm", False)):
            # The sides alternate run by run, so load that comes and goes meets both.
            best = [float("inf")] * 4
            for side in sides:
                # Warms this side's engine over every node its cycles will send.
                await client.cycles(side[2], times=walk_of(side[1]))
            for _ in range(repeat):
                for at, (runtime, shape, target, booker) in enumerate(sides):
                    runs = (
                        lambda target=target, booker=booker: client.timed(target, [], booker),
                        clocked(judge_mix(runtime, shape, pods), booker, best_nodes),
                    )
                    for kind, timed in enumerate(runs):

                        def before(runtime: Runtime = runtime, fresh: bool = fresh) -> None:
                            if fresh:
                                new_engine(runtime)

                        took = await best_of(1, timed, before)
                        best[2 * at + kind] = min(best[2 * at + kind], took)
            named_http, named_judge, none_http, none_judge = (1e3 * f / len(MIX) for f in best)
            sent = sides[0][1].send or len(sides[0][1].names)
            print(
                f"{count:>6} {sent:>5} {regime:>10} {named_http:>10.2f} "
                f"{none_http:>9.2f} {named_http / none_http:>6.2f} {named_judge:>11.2f} "
                f"{none_judge:>10.2f} {named_judge / none_judge:>6.2f}"
            )
    finally:
        await client.close()
        for server in servers:
            await server.cleanup()


Judge = Callable[[PodRequest, extender.Candidates], object]


def judge_cpu(count: int, seed: int, repeat: int, send: int | None) -> None:
    """Decision time per pod on CPU time (`time.process_time`, so that other processes on
    a shared machine count less than in wall time): the extender's engine-thread work
    (`extender.judge_candidates`: evaluation, node rank, host counts) against the bare
    evaluation (`engine_cycle`) over the same nodes, best of `repeat`, cold and warm."""
    nodes = build_cluster(count, seed)
    runtime, names = runtime_over(nodes)
    if send is not None:
        step = max(1, count // send)
        nodes, names = nodes[::step][:send], names[::step][:send]

    def best(run: Callable[[Engine], Judge], cold: bool) -> float:
        total = 0.0
        for request in MIX:
            times = []
            engine = Engine()
            for _ in range(repeat):
                engine = Engine() if cold else engine
                taken = extender.candidates(runtime, names, request.key)
                gc.collect()
                gc.disable()
                try:
                    started = time.process_time()
                    run(engine)(request, taken)
                    times.append(time.process_time() - started)
                finally:
                    gc.enable()
            total += min(times)
        return 1e3 * total / len(MIX)

    def judge(engine: Engine) -> Judge:
        return lambda request, taken: extender.judge_candidates(request, taken, engine)

    def bare(engine: Engine) -> Judge:
        return lambda request, _: engine_cycle(nodes, request, engine)

    cold = best(judge, True), best(bare, True)
    warm = best(judge, False), best(bare, False)
    print(
        f"{count:>6} {len(names):>5} {cold[0]:>13.2f} {cold[1]:>15.2f} {cold[0] / cold[1]:>6.2f} "
        f"{warm[0]:>13.2f} {warm[1]:>15.2f} {warm[0] / warm[1]:>6.2f}"
    )


@dataclass(frozen=True)
class Options:
    """How the cycles are sent: see `Shape` and `sent_shape`."""

    fixed: bool = False
    plain: bool = False
    book: bool = False
    profile: bool = False
    pki: bench_pki.Pki | None = None
    warm: bool = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile of the server over one warm HTTP mix"
    )
    parser.add_argument("--send", type=int, default=None, help="nodes per cycle (default all)")
    parser.add_argument(
        "--fixed",
        action="store_true",
        help="send the same every-k-th --send nodes each cycle (not kube-scheduler's walk)",
    )
    parser.add_argument(
        "--book", action="store_true", help="each cycle's chosen node takes its pod (see Booker)"
    )
    parser.add_argument("--warm", action="store_true", help="the warm regime only")
    parser.add_argument(
        "--plain-http",
        action="store_true",
        help="serve plain HTTP (production serves mutual TLS, the default here)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="CPU time of the server process (server and engine thread), not wall time",
    )
    parser.add_argument(
        "--judge",
        action="store_true",
        help="CPU ms per pod of the extender's judging (rank included) vs the bare engine",
    )
    parser.add_argument(
        "--identities",
        action="store_true",
        help="named nodes against the same fleet without identities, per cycle (HTTP, judging)",
    )
    args = parser.parse_args()
    if args.cpu:
        CLOCK[0] = time.process_time
    PROFILE_ORDER[0] = os.environ.get("NUMATOPO_PROFILE_ORDER", "tottime")
    if args.judge:
        print(f"pod mix: {', '.join(p.name for p in MIX)}; CPU ms per pod (judging, no HTTP)")
        columns = ("cold judge ms", "cold engine ms", "ratio")
        columns += ("warm judge ms", "warm engine ms", "ratio")
        print(f"{'nodes':>6} {'sent':>5} " + " ".join(f"{c:>{max(6, len(c))}}" for c in columns))
        for count in args.nodes:
            judge_cpu(count, args.seed, args.repeat, args.send)
        return
    with tempfile.TemporaryDirectory(prefix="numatopo-bench-pki-") as folder:
        pki = None if args.plain_http else bench_pki.make_pki(Path(folder))
        how = Options(args.fixed, args.plain_http, args.book, args.profile, pki, args.warm)
        walk = "the same nodes each cycle" if args.fixed or args.send is None else (
            "kube-scheduler's walk (each cycle the next nodes)")  # fmt: skip
        print(f"pod mix: {', '.join(p.name for p in MIX)}; ms per scheduling cycle (one pod), "
              f"{'CPU' if args.cpu else 'wall'} time; "
              f"{'plain HTTP' if args.plain_http else 'mutual TLS'}; {walk}"
              f"{'; chosen nodes booked' if args.book else ''}")  # fmt: skip
        if args.identities:
            print(f"{'nodes':>6} {'sent':>5} {'regime':>10} {'named http':>10} {'none http':>9} "
                  f"{'ratio':>6} {'named judge':>11} {'none judge':>10} {'ratio':>6}")  # fmt: skip
            for count in args.nodes:
                asyncio.run(compare_identities(count, args.seed, args.repeat, args.send, how))
            return
        print(f"{'nodes':>6} {'sent':>5} {'regime':>10} {'http ms':>8} {'judge ms':>9} "
              f"{'http/judge':>10} {'count ms':>9} {'judge/count':>11} {'list ms':>8} "
              f"{'p99 ms':>8}")  # fmt: skip
        for count in args.nodes:
            asyncio.run(measure(count, args.seed, args.repeat, args.send, how))


if __name__ == "__main__":
    main()
