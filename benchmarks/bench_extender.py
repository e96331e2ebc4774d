"""Extender latency: filter + prioritize over real HTTP vs the judging alone vs counts.

One scheduling cycle of a node-cache-capable kube-scheduler is one `POST /filter` with
ExtenderArgs {Pod, NodeNames} and one `POST /prioritize` with the nodes that passed.
This runs the operator's own extender app (aiohttp, on a loopback port; the client in
the same process) over a ledger holding the nodes of `bench_engine.build_cluster` (a
realistic fleet: fixture machines and the Alibaba node list's models, every node with
its own name, GPU UUIDs and bus ids, and a fresh heartbeat; seeded mixed occupancy).
Per cycle, in the same run:

  * `http ms`: the cycle over HTTP (bodies sent as JSON bytes, as kube-scheduler's Go
    client encodes them; the filter answer parsed for the nodes to prioritize);
    `p99 ms`: the 99th percentile of one cycle's wall time over HTTP, over every cycle
    of the regime's runs (--repeat times the pod mix), on whatever load the machine has;
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

`--cpu` reads the process's CPU time (every thread: the client, the server, the engine
thread) instead of wall time: on a loaded machine, wall time is mostly waiting for a
core. `--judge` reads CPU time, not wall time, so that a shared machine's other load counts
less; run it from two checkouts back to back (PYTHONPATH at each one's source roots)
to compare the decision time of two versions of the rank.
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

import aiohttp  # noqa: E402
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
    for group in group_by_shape(nodes, engine=engine):
        outcomes = evaluate_many(
            group.topology, group.states, request, checked=False, engine=engine
        )
        feasible += sum(1 for outcome in outcomes if isinstance(outcome, int))
    return feasible


async def extender_cycle(
    session: aiohttp.ClientSession, url: str, pod: dict[str, Any], names: list[str]
) -> int:
    """filter, then prioritize with the nodes that passed, as kube-scheduler calls them.
    Bodies go out as JSON bytes (kube-scheduler encodes them in Go: not the extender's
    cost); the filter answer is parsed for its NodeNames, as the scheduler does."""
    headers = {"Content-Type": "application/json"}
    body = json.dumps({"Pod": pod, "NodeNames": names}).encode()
    async with session.post(f"{url}/filter", data=body, headers=headers) as response:
        filtered = json.loads(await response.read())
    passed = filtered["NodeNames"]
    body = json.dumps({"Pod": pod, "NodeNames": passed}).encode()
    async with session.post(f"{url}/prioritize", data=body, headers=headers) as response:
        json.loads(await response.read())
    return len(passed)


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


CLOCK = [time.perf_counter]  # `--cpu`: the process's CPU time, every thread's


async def best_of(
    repeat: int, run: Callable[[], Awaitable[object]], before: Callable[[], object]
) -> float:
    """Best time of `repeat` runs, with the collector paused as `timeit` does."""
    clock = CLOCK[0]
    times = []
    for _ in range(repeat):
        before()
        gc.collect()
        gc.disable()
        try:
            started = clock()
            await run()
            times.append(clock() - started)
        finally:
            gc.enable()
    return min(times)


async def measure(count: int, seed: int, repeat: int, profile: bool, send: int | None) -> None:
    nodes = build_cluster(count, seed)
    runtime, names = runtime_over(nodes)
    if send is not None:
        # kube-scheduler sends the nodes it scored, not the cluster: every k-th one here.
        step = max(1, count // send)
        nodes, names = nodes[::step][:send], names[::step][:send]
    pods = [pod_manifest(request, f"uid-{i}") for i, request in enumerate(MIX)]
    app_runner = web.AppRunner(extender.build_app(runtime), access_log=None)
    await app_runner.setup()
    site = web.TCPSite(app_runner, "127.0.0.1", 0)
    await site.start()
    port = app_runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}"
    rows: list[tuple[str, float, float, float, float]] = []
    try:
        async with aiohttp.ClientSession() as session:
            # Every side must agree on which nodes fit, or the comparison means nothing.
            for pod, request in zip(pods, MIX, strict=True):
                http_passed = await extender_cycle(session, url, pod, names)
                assert http_passed == engine_cycle(nodes, request, Engine()), request.name

            latencies: list[float] = []

            async def http_mix() -> None:
                for pod in pods:
                    started = time.perf_counter()
                    await extender_cycle(session, url, pod, names)
                    latencies.append(time.perf_counter() - started)

            async def judge_mix() -> None:
                for request in MIX:
                    taken = extender.candidates(runtime, names)
                    extender.judge_candidates(request, taken, runtime.decisions)

            async def count_mix() -> None:
                for request in MIX:
                    count_only_filter(runtime, names, request)

            async def list_mix() -> None:
                for request in MIX:
                    count_only_pass(nodes, request)

            if profile:
                profiler = cProfile.Profile()
                profiler.enable()
                await http_mix()
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
                return
            counting = await best_of(repeat, count_mix, lambda: None)
            listing = await best_of(repeat, list_mix, lambda: None)
            for regime, before in (
                ("new engine", lambda: new_engine(runtime)),
                ("first pod", lambda: first_pods(runtime)),
                ("warm", lambda: None),
            ):
                latencies.clear()
                http = await best_of(repeat, http_mix, before)
                p99 = float(np.percentile(latencies, 99))
                judged = await best_of(repeat, judge_mix, before)
                rows.append((regime, http, judged, counting, p99))
    finally:
        await app_runner.cleanup()
    cycles = len(MIX)
    for regime, http, judged, counting, p99 in rows:
        print(
            f"{count:>6} {len(names):>5} {regime:>10} {1e3 * http / cycles:>8.2f} "
            f"{1e3 * judged / cycles:>9.2f} {http / judged:>10.2f} "
            f"{1e3 * counting / cycles:>9.3f} {judged / counting:>11.1f} "
            f"{1e3 * listing / cycles:>8.3f} {1e3 * p99:>8.1f}"
        )


Side = tuple[Runtime, list[str], str, web.AppRunner]
"""One fleet's extender: its runtime, the names sent, its URL, its server."""


async def compare_identities(count: int, seed: int, repeat: int, send: int | None) -> None:
    """The operator's decisions over named nodes (their own names, GPU UUIDs and bus ids)
    against the same fleet without identities (same shapes, same bookings), in one run:
    an extender app per fleet, the same pods, each regime timed on both alternately."""
    pods = [pod_manifest(request, f"uid-{i}") for i, request in enumerate(MIX)]
    sides: list[Side] = []
    for named in (True, False):
        runtime, names = runtime_over(build_cluster(count, seed, names=named))
        if send is not None:
            names = names[:: max(1, count // send)][:send]
        app_runner = web.AppRunner(extender.build_app(runtime), access_log=None)
        await app_runner.setup()
        await web.TCPSite(app_runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{app_runner.addresses[0][1]}"
        sides.append((runtime, names, url, app_runner))
    try:
        async with aiohttp.ClientSession() as session:

            async def http_mix(side: Side) -> None:
                for pod in pods:
                    await extender_cycle(session, side[2], pod, side[1])

            async def judge_mix(side: Side) -> None:
                runtime, names = side[0], side[1]
                for request in MIX:
                    taken = extender.candidates(runtime, names)
                    extender.judge_candidates(request, taken, runtime.decisions)

            for regime, fresh in (("new engine", True), ("warm", False)):
                # The sides alternate run by run, so load that comes and goes meets both.
                best = [float("inf")] * 4
                for side in sides:
                    await http_mix(side)  # warms this side's engine
                for _ in range(repeat):
                    for at, side in enumerate(sides):
                        for kind, run in enumerate((http_mix, judge_mix)):

                            async def once(run: Any = run, side: Side = side) -> None:
                                await run(side)

                            def before(side: Side = side, fresh: bool = fresh) -> None:
                                if fresh:
                                    new_engine(side[0])

                            took = await best_of(1, once, before)
                            best[2 * at + kind] = min(best[2 * at + kind], took)
                named_http, named_judge, none_http, none_judge = (1e3 * f / len(MIX) for f in best)
                print(
                    f"{count:>6} {len(sides[0][1]):>5} {regime:>10} {named_http:>10.2f} "
                    f"{none_http:>9.2f} {named_http / none_http:>6.2f} {named_judge:>11.2f} "
                    f"{none_judge:>10.2f} {named_judge / none_judge:>6.2f}"
                )
    finally:
        for *_, app_runner in sides:
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
                taken = extender.candidates(runtime, names)
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
    parser.add_argument("--profile", action="store_true", help="cProfile one warm HTTP mix")
    parser.add_argument("--send", type=int, default=None, help="nodes per cycle (default all)")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="CPU time of the process (client, server and engine thread), not wall time",
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
