"""A warm scheduling cycle is judged on the event loop (`judge_off_loop`): only from what
the engine keeps (`warm_only`, the same verdicts as the engine thread's), and only while
the engine thread is idle (`Runtime.engine_if_idle`), never beside it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from numatopo_engine.allocation import Engine, NotWarmError, allocate
from numatopo_engine.annotations import PolicyName
from numatopo_engine.model import Numatopology
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.state import NodeState
from numatopo_operator.extender import Verdicts, candidates, judge_candidates, judge_off_loop
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

TOPOLOGIES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
SHAPES = ("h100-nvswitch", "dgx1-v100", "pcie-8gpu", "cpu-2socket-ht")


def request(name: str, gpus: int, cpu_milli: int = 4000) -> PodRequest:
    return PodRequest(
        "ml", name, (ContainerRequest(name="main", cpu_milli=cpu_milli, gpus=gpus),),
        options=TopologyOptions(policy=PolicyName.BEST_EFFORT),
    )  # fmt: skip


PODS = [request("one", 1), request("four", 4), request("cpu", 0, 16000)]


class CountingExecutor(ThreadPoolExecutor):
    """The engine thread, counting the jobs it is handed."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.jobs = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.jobs += 1
        return super().submit(fn, *args, **kwargs)


def fleet(engine: ThreadPoolExecutor | None = None, mix: str = "") -> tuple[Runtime, list[str]]:
    """Three nodes of each of a few shapes, every other one half booked."""
    settings = OperatorSettings(workload_mix=mix)
    runtime = Runtime(settings, engine=engine) if engine is not None else Runtime(settings)
    names = []
    for shape in SHAPES:
        spec = Numatopology.model_validate_json((TOPOLOGIES / f"{shape}.json").read_text()).spec
        for index in range(3):
            node = f"{shape}-{index}"
            runtime.ledger.set_topology(node, spec)
            if index % 2:
                filler = request(f"filler-{node}", 4 if spec.gpus else 0, 8000)
                booked = allocate(spec, NodeState(spec), filler, node).assignment
                runtime.ledger.reserve(node, filler.key, booked)
            names.append(node)
    return runtime, names


def answers(verdicts: Verdicts) -> tuple[object, ...]:
    return verdicts.ranks, verdicts.scores, verdicts.failed, verdicts.unresolvable


@pytest.mark.parametrize("mix", ["", "1x4:4,4x16:2,8x32:1"])
def test_warm_only_answers_as_a_full_judging_or_not_at_all(mix: str) -> None:
    runtime, names = fleet(mix=mix)
    engine = Engine()
    for pod in PODS:
        taken = candidates(runtime, names, pod.key)
        with pytest.raises(NotWarmError):
            judge_candidates(pod, taken, engine, warm_only=True)
        full = judge_candidates(pod, taken, engine)

        warm = judge_candidates(pod, taken, engine, warm_only=True)

        assert answers(full) == answers(warm)
        assert answers(full) == answers(judge_candidates(pod, taken, Engine()))
    # A node booked since: its row is new, so nothing is answered from the memos alone.
    spec = runtime.ledger.topology(names[0])
    assert spec is not None
    landed = request("landed", 1)
    runtime.ledger.reserve(
        names[0], landed.key, allocate(spec, NodeState(spec), landed, names[0]).assignment
    )
    with pytest.raises(NotWarmError):
        judge_candidates(PODS[0], candidates(runtime, names, PODS[0].key), engine, warm_only=True)


async def test_a_warm_cycle_takes_no_hop_to_the_engine_thread() -> None:
    executor = CountingExecutor()
    try:
        runtime, names = fleet(executor)
        pod = PODS[1]

        cold = await judge_off_loop(runtime, pod, names)
        assert executor.jobs == 1
        warm = await judge_off_loop(runtime, pod, names)
        assert executor.jobs == 1
        assert answers(cold) == answers(warm)

        # A node booked since the last cycle: decided in the engine thread again.
        spec = runtime.ledger.topology(names[0])
        assert spec is not None
        landed = request("landed", 1)
        booked = allocate(spec, NodeState(spec), landed, names[0]).assignment
        runtime.ledger.reserve(names[0], landed.key, booked)
        after = await judge_off_loop(runtime, pod, names)
        assert executor.jobs == 2
        assert answers(after) == answers(judge_candidates(pod, candidates(runtime, names)))
    finally:
        executor.shutdown()


async def test_the_loop_judges_only_while_the_engine_thread_is_idle() -> None:
    runtime = Runtime(OperatorSettings())
    started, release = threading.Event(), threading.Event()

    def busy() -> None:
        started.set()
        release.wait(10)

    job = asyncio.ensure_future(runtime.in_engine_thread(busy))
    assert await asyncio.to_thread(started.wait, 10)
    with runtime.engine_if_idle() as idle:
        assert not idle
    release.set()
    await job

    ran = threading.Event()
    with runtime.engine_if_idle() as idle:
        assert idle
        # The engine thread's next job waits until the loop is done with the memos.
        queued = asyncio.ensure_future(runtime.in_engine_thread(ran.set))
        await asyncio.sleep(0.2)
        assert not ran.is_set()
    await queued
    assert ran.is_set()
