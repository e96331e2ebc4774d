"""Extender latency: filter + prioritize over real HTTP vs the bare engine, same nodes.

One scheduling cycle of a node-cache-capable kube-scheduler is one `POST /filter` with
ExtenderArgs {Pod, NodeNames} and one `POST /prioritize` with the nodes that passed.
This runs the operator's own extender app (aiohttp, on a loopback port) over a ledger
holding the nodes of `bench_engine.build_cluster` (a realistic fleet: fixture machines
and the Alibaba node list's models, every node with its own name, GPU UUIDs and bus
ids; seeded mixed occupancy), and on the same nodes the bare engine: `allocation.evaluate_many` per
hardware shape, as filter+prioritize need it. The ratio is the HTTP/JSON layer's cost
(goal: at most 1.5x); `engine/count` is the cold engine over a count-only pass of the
same sent nodes in the same run (`bench_engine.count_only_pass`; goal: at most 3x).

`cold` starts each cycle with a fresh `allocation.Engine` (the first pod of its shape);
`warm` repeats the cycle over unchanged nodes (the next replicas of the same job).
`--send N` sends kube-scheduler's call shape: N of the cluster's nodes per cycle (its
percentageOfNodesToScore sends about 500 of 5,000).

    .venv/bin/python benchmarks/bench_extender.py [--nodes 1000 5000] [--send 500] [--repeat 3]
    .venv/bin/python benchmarks/bench_extender.py --nodes 5000 --profile   # where time goes
    NUMATOPO_WORKLOAD_MIX=1x4:4,2x8:2,4x16:2,8x32:2 .venv/bin/python benchmarks/bench_extender.py
    NUMATOPO_WORKLOAD_MIX=... .venv/bin/python benchmarks/bench_extender.py --judge --nodes 1000 \
        --send 500 --repeat 7   # CPU time of the decision alone (rank and host counts included)

`--judge` reads CPU time, not wall time, so that a shared machine's other load counts
less; run it from two checkouts back to back (PYTHONPATH at each one's source roots)
to compare the decision time of two versions of the rank.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
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
    return runtime, names


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
    async with session.post(f"{url}/filter", json={"Pod": pod, "NodeNames": names}) as response:
        filtered = await response.json()
    passed = filtered["NodeNames"]
    async with session.post(
        f"{url}/prioritize", json={"Pod": pod, "NodeNames": passed}
    ) as response:
        await response.json()
    return len(passed)


def forget_decisions(nodes: Nodes, runtime: Runtime, engines: list[Engine]) -> None:
    """A new scheduling epoch: fresh memo tables (each node keeps its row until it
    changes, as in production)."""
    del nodes
    # The Runtime is frozen against rebinding (kopf's memo copies); no copy exists here.
    object.__setattr__(runtime, "decisions", Engine())
    engines[0] = Engine()


async def best_of(
    repeat: int, run: Callable[[], Awaitable[object]], before: Callable[[], object]
) -> float:
    """Best wall time of `repeat` runs, with the collector paused as `timeit` does."""
    times = []
    for _ in range(repeat):
        before()
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            await run()
            times.append(time.perf_counter() - started)
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
    engines = [Engine()]
    pods = [pod_manifest(request, f"uid-{i}") for i, request in enumerate(MIX)]
    app_runner = web.AppRunner(extender.build_app(runtime), access_log=None)
    await app_runner.setup()
    site = web.TCPSite(app_runner, "127.0.0.1", 0)
    await site.start()
    port = app_runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            # Both sides must agree on which nodes fit, or the comparison means nothing.
            for pod, request in zip(pods, MIX, strict=True):
                http_passed = await extender_cycle(session, url, pod, names)
                assert http_passed == engine_cycle(nodes, request, engines[0]), request.name

            async def http_mix() -> None:
                for pod in pods:
                    await extender_cycle(session, url, pod, names)

            async def engine_mix() -> None:
                for request in MIX:
                    engine_cycle(nodes, request, engines[0])

            if profile:
                profiler = cProfile.Profile()
                profiler.enable()
                await http_mix()
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
                return
            forget = lambda: forget_decisions(nodes, runtime, engines)  # noqa: E731
            cold_http = await best_of(repeat, http_mix, forget)
            cold_engine = await best_of(repeat, engine_mix, forget)
            warm_http = await best_of(repeat, http_mix, lambda: None)
            warm_engine = await best_of(repeat, engine_mix, lambda: None)

            async def count_mix() -> None:
                for request in MIX:
                    count_only_pass(nodes, request)

            counting = await best_of(repeat, count_mix, lambda: None)
    finally:
        await app_runner.cleanup()
    cycles = len(MIX)
    print(
        f"{count:>6} {len(names):>5} {1e3 * cold_http / cycles:>13.1f} "
        f"{1e3 * cold_engine / cycles:>15.1f} "
        f"{cold_http / cold_engine:>6.2f} {1e3 * warm_http / cycles:>13.1f} "
        f"{1e3 * warm_engine / cycles:>15.1f} {warm_http / warm_engine:>6.2f} "
        f"{1e3 * counting / cycles:>9.2f} {cold_engine / counting:>13.1f}"
    )


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
        "--judge",
        action="store_true",
        help="CPU ms per pod of the extender's judging (rank included) vs the bare engine",
    )
    args = parser.parse_args()
    if args.judge:
        print(f"pod mix: {', '.join(p.name for p in MIX)}; CPU ms per pod (judging, no HTTP)")
        columns = ("cold judge ms", "cold engine ms", "ratio")
        columns += ("warm judge ms", "warm engine ms", "ratio")
        print(f"{'nodes':>6} {'sent':>5} " + " ".join(f"{c:>{max(6, len(c))}}" for c in columns))
        for count in args.nodes:
            judge_cpu(count, args.seed, args.repeat, args.send)
        return
    print(f"pod mix: {', '.join(p.name for p in MIX)}; ms per scheduling cycle (one pod)")
    print(f"{'nodes':>6} {'sent':>5} {'cold http ms':>13} {'cold engine ms':>15} {'ratio':>6} "
          f"{'warm http ms':>13} {'warm engine ms':>15} {'ratio':>6} {'count ms':>9} "
          f"{'engine/count':>13}")  # fmt: skip
    for count in args.nodes:
        asyncio.run(measure(count, args.seed, args.repeat, args.profile, args.send))


if __name__ == "__main__":
    main()
