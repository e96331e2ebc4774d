"""Event-loop stall while the engine decides: filter over many nodes, 64-NUMA decisions.

kopf's watches, the Lease renewals and the extender share one event loop. This runs the
operator's extender app (aiohttp, loopback) over a ledger of `--nodes` nodes of a
realistic fleet (`bench_engine.fleet_shapes`: DGX-1 V100, 8x H100 NVSwitch, 8x L40S
PCIe and AWS p4d fixtures, and the Alibaba node list's models in its proportions), each
node with its own name, GPU UUIDs and bus ids as its exporter publishes them
(`simulation.fleet.identify`) and its own spec object, as parsed from its own CRD; and
a probe task on the same loop that sleeps 10 ms over and over, recording how late each
wake-up comes. The baseline, in the same run: the same nodes without identities (every
node of a shape with the shape's names, what the figures before fleets measured).

It reports the cycle time and the worst lag during: a cold `/filter` + `/prioritize` of
a 4-GPU `single-numa-node` pod over every node (first pod after the topologies are
loaded: per-shape tables built, every node's free row computed), warm ones, and
`assigning.decide` on a 64-NUMA node (tests/fixtures/topologies).

    .venv/bin/python benchmarks/bench_loop_lag.py [--nodes 500 5000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / p) for p in ("engine", "kube", "operator", "exporter", "benchmarks")]

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from bench_engine import fleet_shapes  # noqa: E402
from numatopo_engine import annotations as keys  # noqa: E402
from numatopo_engine import pod_request  # noqa: E402
from numatopo_engine.model import NumatopologySpec  # noqa: E402
from numatopo_engine.request import PodRequest  # noqa: E402
from numatopo_engine.simulation.fleet import identify, node_name  # noqa: E402
from numatopo_operator import assigning, extender  # noqa: E402
from numatopo_operator.runtime import Runtime  # noqa: E402
from numatopo_operator.settings import OperatorSettings  # noqa: E402

TOPOLOGIES = REPO / "tests" / "fixtures" / "topologies"
TICK = 0.01


def spec_of(name: str) -> NumatopologySpec:
    return NumatopologySpec.model_validate(json.loads((TOPOLOGIES / name).read_text())["spec"])


def pod(name: str, *, cpu: str, gpus: int = 0, policy: str = "single-numa-node") -> dict[str, Any]:
    resources: dict[str, str] = {"cpu": cpu, "memory": "8Gi"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"uid-{name}",
            "annotations": {keys.POLICY: policy},
        },
        "spec": {
            "containers": [
                {"name": "main", "resources": {"requests": resources, "limits": resources}}
            ]
        },
    }


def ready_runtime() -> Runtime:
    runtime = Runtime(OperatorSettings())
    for event in (runtime.role_known, runtime.active, runtime.indexed, runtime.ledger_current):
        event.set()
    return runtime


async def worst_lag(work: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """(worst wake-up lag of the probe, wall time of `work`) in seconds."""
    loop = asyncio.get_running_loop()
    worst = 0.0
    done = False

    async def probe() -> None:
        nonlocal worst
        while not done:
            started = loop.time()
            await asyncio.sleep(TICK)
            worst = max(worst, loop.time() - started - TICK)

    task = asyncio.create_task(probe())
    await asyncio.sleep(3 * TICK)
    started = time.perf_counter()
    await work()
    wall = time.perf_counter() - started
    await asyncio.sleep(3 * TICK)
    done = True
    await task
    return worst, wall


def fleet(count: int, *, names: bool, seed: int = 7) -> list[tuple[str, NumatopologySpec]]:
    """`count` nodes drawn from the fleet's shapes by their weights, each its own spec
    object; with `names`, each with its own GPU UUIDs and bus ids."""
    shapes, weights = fleet_shapes()
    texts = [json.dumps(shape.to_wire()) for shape in shapes]
    picked = random.Random(seed).choices(range(len(shapes)), weights=weights, k=count)
    nodes = []
    for index, shape in enumerate(picked):
        name = node_name(index)
        spec = NumatopologySpec.model_validate_json(texts[shape])
        nodes.append((name, identify(spec, name, seed=seed) if names else spec))
    return nodes


async def extender_lag(
    nodes: list[tuple[str, NumatopologySpec]], repeat: int
) -> list[tuple[float, float, int]]:
    """(cycle seconds, worst lag seconds, nodes passed) of the cold cycle, then each warm one."""
    runtime = ready_runtime()
    names = [name for name, _ in nodes]
    for name, spec in nodes:
        runtime.ledger.set_topology(name, spec)
    # What the operator does once its start-up lists are in (`main.freeze_listed_heap`).
    gc.collect()
    gc.freeze()
    runner = web.AppRunner(extender.build_app(runtime), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    results = []
    try:
        async with aiohttp.ClientSession() as session:
            for round_number in range(repeat + 1):
                job = pod(f"job-{round_number}", cpu="8", gpus=4)
                passed: list[str] = []

                async def cycle(job: dict[str, Any] = job, passed: list[str] = passed) -> None:
                    async with session.post(
                        f"{url}/filter", json={"Pod": job, "NodeNames": names}
                    ) as response:
                        passed[:] = (await response.json())["NodeNames"]
                    assert passed, "no node takes the pod"
                    async with session.post(
                        f"{url}/prioritize", json={"Pod": job, "NodeNames": passed}
                    ) as response:
                        await response.json()

                lag, wall = await worst_lag(cycle)
                results.append((wall, lag, len(passed)))
    finally:
        await runner.cleanup()
        gc.unfreeze()
    return results


Result = list[tuple[float, float, int]]


def report(count: int, named: Result, bare: Result) -> None:
    for label, (one, other) in (("cold", (named[:1], bare[:1])), ("warm", (named[1:], bare[1:]))):
        if not one:
            continue
        cycle = [r[0] * 1e3 for r in one]
        lag = [r[1] * 1e3 for r in one]
        base_cycle = [r[0] * 1e3 for r in other]
        base_lag = [r[1] * 1e3 for r in other]
        print(
            f"extender {label} {count:>6} nodes ({one[0][2]} fit): "
            f"cycle {_span(cycle)} ms (no identities {_span(base_cycle)}, "
            f"{min(cycle) / min(base_cycle):.2f}x), worst loop lag {_span(lag)} ms "
            f"(no identities {_span(base_lag)})"
        )


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.1f}" if high - low < 0.05 else f"{low:.1f}-{high:.1f}"


async def numa64_lag(repeat: int) -> None:
    runtime = ready_runtime()
    runtime.ledger.set_topology("numa64", spec_of("numa64-synthetic.json"))
    for cpu in ("20", "40"):
        for number in range(repeat):
            request = pod_request.request_from_pod(
                pod(f"p{cpu}-{number}", cpu=cpu, policy="best-effort"), runtime.settings.resources
            )

            async def decide(request: PodRequest = request) -> None:
                outcome = await assigning.decide(runtime, request, "numa64", path="assigner")
                assert outcome is not None
                assert outcome.assignment is not None
                runtime.ledger.cancel(request.key)  # the next decision sees an empty node

            lag, wall = await worst_lag(decide)
            print(f"64-NUMA decide, {cpu} CPUs best-effort: {wall * 1e3:7.1f} ms, "
                  f"worst loop lag {lag * 1e3:6.1f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--repeat", type=int, default=3, help="warm cycles / decisions")
    args = parser.parse_args()
    print(f"probe: sleeps {TICK * 1e3:.0f} ms in a loop; lag = how late it woke")
    # Untimed: what the process does once whoever comes first (imports, numpy's and
    # aiohttp's first calls) cost the first fleet measured 50-90 ms, named or not.
    asyncio.run(extender_lag(fleet(50, names=True), 0))
    for count in args.nodes:
        named = asyncio.run(extender_lag(fleet(count, names=True), args.repeat))
        bare = asyncio.run(extender_lag(fleet(count, names=False), args.repeat))
        report(count, named, bare)
    asyncio.run(numa64_lag(args.repeat))


if __name__ == "__main__":
    main()
