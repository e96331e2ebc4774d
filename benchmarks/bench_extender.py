"""Extender latency: filter + prioritize over real HTTP vs the judging alone vs counts.

One scheduling cycle of a node-cache-capable kube-scheduler is one `POST /filter` with
ExtenderArgs {Pod, NodeNames} and one `POST /prioritize` with the nodes that passed.
This runs the operator's own extender app (aiohttp, on a loopback port) over a ledger
holding the nodes of `bench_engine.build_cluster` (a realistic fleet: fixture machines
and the Alibaba node list's models, every node with its own name, GPU UUIDs and bus
ids, and a fresh heartbeat; seeded mixed occupancy). kube-scheduler's side runs in a
process of its own, as in a cluster (`scheduler_client.py`, driven over a pipe: "run
the mix N times", answered with each cycle's latency): it sends each pod's filter
body encoded once, parses the filter answer and encodes the prioritize body from the
nodes that passed, over one keep-alive connection. Every side must agree on which
nodes fit (checked per pod before timing). Per cycle, in the same run:

  * `http ms`: the cycle over HTTP, as the extender pays it: with `--cpu`, this
    process's CPU time while the client runs the mix (the server and its engine
    thread; the client's encoding and parsing are not counted), else the wall time of
    the cycle as the client sees it; `p99 ms`: the 99th percentile of one cycle's wall
    time as the client sees it, over every cycle of the regime's runs (--repeat times
    the pod mix), on whatever load the machine has;
  * `judge ms`: what the cycle's filter runs of the engine, on the operator's own
    engine (`runtime.decisions`): `extender.candidates` (the ledger's frozen states and
    the candidates' staleness) and `extender.judge_candidates` (scores, refusals, node
    rank); prioritize reuses filter's ranks for the same pod. `http/judge` is the
    HTTP/JSON layer's cost (goal: at most 1.5x);
  * `count ms`: a topology-blind extender's filter at the same call shape
    (`count_only_filter`): each sent node's state from the same ledger, its O(1) free
    CPU, GPU and memory counters against the pod's, the nodes that pass and why the
    others do not. `judge/count` has a goal of at most 3x. `list ms` is
    `bench_engine.count_only_pass` over a prepared list of the same nodes' states (no
    names, no result), for comparison with earlier figures.

Regimes, each its own row: `new engine` starts every cycle with a fresh
`allocation.Engine` (hardware tables, plans and verdicts built again: a restarted
operator); `first pod` keeps the hardware tables but no plan or verdict (the first pod
of its kind on a running operator); `warm` repeats the cycle over unchanged nodes (the
next replicas of the same job). `--send N` sends kube-scheduler's call shape: N of the
cluster's nodes per cycle (its percentageOfNodesToScore sends about 500 of 5,000).

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
loop's thread and the engine thread) over one warm mix. `--judge` reads CPU time, not
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
import os
import pstats
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "engine"), str(REPO / "operator"), str(REPO / "benchmarks")]

import numpy as np  # noqa: E402
from aiohttp import web  # noqa: E402

from bench_engine import MIX, build_cluster, count_only_pass  # noqa: E402
from numatopo_engine import annotations as keys  # noqa: E402
from numatopo_engine.allocation import Engine, evaluate_many, group_by_shape  # noqa: E402
from numatopo_engine.model import NumatopologySpec  # noqa: E402
from numatopo_engine.request import PodRequest  # noqa: E402
from numatopo_engine.state import NodeState  # noqa: E402
from numatopo_operator import extender  # noqa: E402
from numatopo_operator.runtime import Runtime  # noqa: E402
from numatopo_operator.settings import OperatorSettings  # noqa: E402

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

    async def target(self, url: str, pods: list[dict[str, Any]], names: list[str]) -> int:
        """Sets up an extender to call; its number for `cycles`."""
        answer = await self._ask({"url": url, "pods": pods, "names": names})
        return int(answer["target"])

    async def cycles(self, target: int, times: int = 1) -> tuple[list[float], list[int]]:
        """The pod mix `times` over: per cycle, the wall seconds the client saw and how
        many nodes passed filter."""
        answer = await self._ask({"run": target, "times": times})
        return answer["latencies"], answer["passed"]

    async def timed(self, target: int, latencies: list[float]) -> float:
        """One run of the mix, timed as `CLOCK` says: this process's CPU (the server and
        its engine thread) or the client's wall time; its cycles' latencies added."""
        if CLOCK[0] is time.perf_counter:
            took, _ = await self.cycles(target)
            latencies += took
            return sum(took)
        started = CLOCK[0]()
        took, _ = await self.cycles(target)
        latencies += took
        return CLOCK[0]() - started

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


CLOCK = [time.perf_counter]  # `--cpu`: this process's CPU time, every thread's


def clocked(run: Callable[[], object]) -> Callable[[], Awaitable[float]]:
    """`run` as a timed run for `best_of`, on `CLOCK`."""

    async def timed() -> float:
        clock = CLOCK[0]
        started = clock()
        run()
        return clock() - started

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


async def serve(
    runtime: Runtime, client: SchedulerClient, pods: Pods, nodes: Nodes, names: list[str]
) -> tuple[int, web.AppRunner]:
    """The operator's extender app over `runtime` on a loopback port, set up as a target
    of `client` (its number), once it is checked to pass, per pod, as many of `names`
    (with `nodes` their topologies and states) as the engine alone does: every side
    must agree on which nodes fit, or the comparison means nothing."""
    app_runner = web.AppRunner(extender.build_app(runtime), access_log=None)
    await app_runner.setup()
    await web.TCPSite(app_runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{app_runner.addresses[0][1]}"
    target = await client.target(url, pods, names)
    _, passed = await client.cycles(target)
    for request, http_passed in zip(MIX, passed, strict=True):
        assert http_passed == engine_cycle(nodes, request, Engine()), request.name
    return target, app_runner


def judge_mix(runtime: Runtime, names: list[str]) -> Callable[[], None]:
    """The mix judged as filter judges it, on the operator's own engine (no HTTP)."""

    def run() -> None:
        for request in MIX:
            taken = extender.candidates(runtime, names, request.key)
            extender.judge_candidates(request, taken, runtime.decisions)

    return run


async def profiled(client: SchedulerClient, target: int, runtime: Runtime) -> None:
    """cProfile of the server side over one warm mix: the event loop's thread, then the
    engine thread's, each on its own thread's CPU time (waiting for a core or for the
    other thread is not counted)."""
    await client.cycles(target)
    loop_profile = cProfile.Profile(time.thread_time)
    engine_profile = cProfile.Profile(time.thread_time)
    runtime.engine.submit(engine_profile.enable).result()
    loop_profile.enable()
    await client.cycles(target)
    loop_profile.disable()
    runtime.engine.submit(engine_profile.disable).result()
    for title, profile in (("event loop", loop_profile), ("engine thread", engine_profile)):
        print(f"-- {title}")
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)


async def measure(count: int, seed: int, repeat: int, profile: bool, send: int | None) -> None:
    nodes = build_cluster(count, seed)
    runtime, names = runtime_over(nodes)
    if send is not None:
        # kube-scheduler sends the nodes it scored, not the cluster: every k-th one here.
        step = max(1, count // send)
        nodes, names = nodes[::step][:send], names[::step][:send]
    pods = [pod_manifest(request, f"uid-{i}") for i, request in enumerate(MIX)]
    rows: list[tuple[str, float, float, float, float]] = []
    client = await SchedulerClient.start()
    app_runner: web.AppRunner | None = None
    try:
        target, app_runner = await serve(runtime, client, pods, nodes, names)
        if profile:
            await profiled(client, target, runtime)
            return

        def count_mix() -> None:
            for request in MIX:
                count_only_filter(runtime, names, request)

        def list_mix() -> None:
            for request in MIX:
                count_only_pass(nodes, request)

        counting = await best_of(repeat, clocked(count_mix), lambda: None)
        listing = await best_of(repeat, clocked(list_mix), lambda: None)
        latencies: list[float] = []
        for regime, before in (
            ("new engine", lambda: new_engine(runtime)),
            ("first pod", lambda: first_pods(runtime)),
            ("warm", lambda: None),
        ):
            latencies.clear()
            http = await best_of(repeat, lambda: client.timed(target, latencies), before)
            p99 = float(np.percentile(latencies, 99))
            judged = await best_of(repeat, clocked(judge_mix(runtime, names)), before)
            rows.append((regime, http, judged, counting, p99))
    finally:
        await client.close()
        if app_runner is not None:
            await app_runner.cleanup()
    cycles = len(MIX)
    for regime, http, judged, counting, p99 in rows:
        print(
            f"{count:>6} {len(names):>5} {regime:>10} {1e3 * http / cycles:>8.2f} "
            f"{1e3 * judged / cycles:>9.2f} {http / judged:>10.2f} "
            f"{1e3 * counting / cycles:>9.3f} {judged / counting:>11.1f} "
            f"{1e3 * listing / cycles:>8.3f} {1e3 * p99:>8.1f}"
        )


Side = tuple[Runtime, list[str], int]
"""One fleet's extender: its runtime, the names sent, its number with the client."""


async def compare_identities(count: int, seed: int, repeat: int, send: int | None) -> None:
    """The operator's decisions over named nodes (their own names, GPU UUIDs and bus ids)
    against the same fleet without identities (same shapes, same bookings), in one run:
    an extender app per fleet, the same pods, each regime timed on both alternately."""
    pods = [pod_manifest(request, f"uid-{i}") for i, request in enumerate(MIX)]
    sides: list[Side] = []
    runners: list[web.AppRunner] = []
    client = await SchedulerClient.start()
    try:
        for named in (True, False):
            nodes = build_cluster(count, seed, names=named)
            runtime, names = runtime_over(nodes)
            if send is not None:
                step = max(1, count // send)
                nodes, names = nodes[::step][:send], names[::step][:send]
            target, app_runner = await serve(runtime, client, pods, nodes, names)
            runners.append(app_runner)
            sides.append((runtime, names, target))
        for regime, fresh in (("new engine", True), ("warm", False)):
            # The sides alternate run by run, so load that comes and goes meets both.
            best = [float("inf")] * 4
            for side in sides:
                await client.cycles(side[2])  # warms this side's engine
            for _ in range(repeat):
                for at, (runtime, names, target) in enumerate(sides):
                    runs = (
                        lambda target=target: client.timed(target, []),
                        clocked(judge_mix(runtime, names)),
                    )
                    for kind, timed in enumerate(runs):

                        def before(runtime: Runtime = runtime, fresh: bool = fresh) -> None:
                            if fresh:
                                new_engine(runtime)

                        took = await best_of(1, timed, before)
                        best[2 * at + kind] = min(best[2 * at + kind], took)
            named_http, named_judge, none_http, none_judge = (1e3 * f / len(MIX) for f in best)
            print(
                f"{count:>6} {len(sides[0][1]):>5} {regime:>10} {named_http:>10.2f} "
                f"{none_http:>9.2f} {named_http / none_http:>6.2f} {named_judge:>11.2f} "
                f"{none_judge:>10.2f} {named_judge / none_judge:>6.2f}"
            )
    finally:
        await client.close()
        for app_runner in runners:
            await app_runner.cleanup()


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
    if args.identities:
        print(f"pod mix: {', '.join(p.name for p in MIX)}; ms per scheduling cycle, "
              f"{'CPU' if args.cpu else 'wall'} time; named vs unnamed nodes")  # fmt: skip
        print(f"{'nodes':>6} {'sent':>5} {'regime':>10} {'named http':>10} {'none http':>9} "
              f"{'ratio':>6} {'named judge':>11} {'none judge':>10} {'ratio':>6}")  # fmt: skip
        for count in args.nodes:
            asyncio.run(compare_identities(count, args.seed, args.repeat, args.send))
        return
    if args.judge:
        print(f"pod mix: {', '.join(p.name for p in MIX)}; CPU ms per pod (judging, no HTTP)")
        columns = ("cold judge ms", "cold engine ms", "ratio")
        columns += ("warm judge ms", "warm engine ms", "ratio")
        print(f"{'nodes':>6} {'sent':>5} " + " ".join(f"{c:>{max(6, len(c))}}" for c in columns))
        for count in args.nodes:
            judge_cpu(count, args.seed, args.repeat, args.send)
        return
    print(f"pod mix: {', '.join(p.name for p in MIX)}; ms per scheduling cycle (one pod), "
          f"{'CPU' if args.cpu else 'wall'} time")  # fmt: skip
    print(f"{'nodes':>6} {'sent':>5} {'regime':>10} {'http ms':>8} {'judge ms':>9} "
          f"{'http/judge':>10} {'count ms':>9} {'judge/count':>11} {'list ms':>8} "
          f"{'p99 ms':>8}")  # fmt: skip
    for count in args.nodes:
        asyncio.run(measure(count, args.seed, args.repeat, args.profile, args.send))


if __name__ == "__main__":
    main()
