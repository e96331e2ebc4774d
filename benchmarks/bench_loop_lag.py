"""Event-loop stall while the engine decides: filter over many nodes, 64-NUMA decisions.

kopf's watches, the Lease renewals and the extender share one event loop. This runs the
operator's extender app (aiohttp, loopback) over a ledger of `--nodes` identical 8-GPU
nodes (each with its own spec object, as parsed from its own CRD), and a probe task on
the same loop that sleeps 10 ms over and over, recording how late each wake-up comes.
It reports the worst lag during: a cold `/filter` + `/prioritize` (first pod after the
topologies are loaded: per-shape tables built, every node's free row computed), a warm
one, and `assigning.decide` on a 64-NUMA node (tests/fixtures/topologies).

    .venv/bin/python benchmarks/bench_loop_lag.py [--nodes 5000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "engine"), str(REPO / "operator"), str(REPO / "exporter")]

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from numatopo_engine import annotations as keys  # noqa: E402
from numatopo_engine import pod_request  # noqa: E402
from numatopo_engine.model import NumatopologySpec  # noqa: E402
from numatopo_engine.request import PodRequest  # noqa: E402
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


async def extender_lag(count: int, repeat: int) -> None:
    runtime = ready_runtime()
    h100 = (TOPOLOGIES / "h100-nvswitch.json").read_text()
    names = [f"node-{i}" for i in range(count)]
    for name in names:
        # One spec object per node, as the operator parses one per Numatopology.
        runtime.ledger.set_topology(name, NumatopologySpec.model_validate(json.loads(h100)["spec"]))
    # What the operator does once its start-up lists are in (`main.freeze_listed_heap`).
    gc.collect()
    gc.freeze()
    runner = web.AppRunner(extender.build_app(runtime), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as session:
            for round_number in range(repeat + 1):
                phase = "cold" if round_number == 0 else "warm"
                job = pod(f"job-{round_number}", cpu="8", gpus=4)

                async def cycle(job: dict[str, Any] = job) -> None:
                    async with session.post(
                        f"{url}/filter", json={"Pod": job, "NodeNames": names}
                    ) as response:
                        passed = (await response.json())["NodeNames"]
                    assert len(passed) == count
                    async with session.post(
                        f"{url}/prioritize", json={"Pod": job, "NodeNames": passed}
                    ) as response:
                        await response.json()

                lag, wall = await worst_lag(cycle)
                print(f"extender {phase:<4} {count:>6} nodes: cycle {wall * 1e3:7.1f} ms, "
                      f"worst loop lag {lag * 1e3:6.1f} ms")  # fmt: skip
    finally:
        await runner.cleanup()
        gc.unfreeze()


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
    parser.add_argument("--nodes", type=int, nargs="+", default=[5000])
    parser.add_argument("--repeat", type=int, default=3, help="warm cycles / decisions")
    args = parser.parse_args()
    print(f"probe: sleeps {TICK * 1e3:.0f} ms in a loop; lag = how late it woke")
    for count in args.nodes:
        asyncio.run(extender_lag(count, args.repeat))
    asyncio.run(numa64_lag(args.repeat))


if __name__ == "__main__":
    main()
