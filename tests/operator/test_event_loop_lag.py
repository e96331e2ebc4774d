"""The operator's event loop keeps turning while the engine decides (issue 10).

kopf's watches, the Lease renewals and the extender all share one event loop, so an
engine call made on it stalls every one of them for as long as it runs. A probe
coroutine inside the operator's own loop sleeps `TICK` over and over and records how
late each wake-up comes; the bound below is what a watch or a renewal may be delayed.

Measured on a 2-core machine with the engine on the loop (before the fix): a cold
`/filter` over 1,000 nodes stalled it ~460 ms, a 64-NUMA bind ~440 ms. The node count
is what the emulator lists in seconds; `benchmarks/bench_loop_lag.py` measures 5,000.

A loaded machine delays every wake-up, whoever's work it is (one run measured 261 ms
against a 180 ms bound with the engine off the loop; later 172 ms and 813 ms against
150 ms with the baseline below). So the probe checks two things, neither of which the
machine's load can stretch:

- the work done on the operator's loop between two wake-ups (the loop thread's CPU
  time) stays under `WORK_BOUND`: the engine on the loop runs there for its whole call;
- a late wake-up, beyond the worst of a second probe ticking over the same window in an
  idle process of its own (it suffers the machine's load, but neither the operator's
  work nor its GIL), counts only as long as this process was working meanwhile (every
  thread's CPU time): an engine thread that keeps the GIL works the whole stall; a loop
  waiting for a core the machine gives to other processes does not.

Measured on a 2-core machine at load 3-8: loop work at most 13-78 ms per wake-up with
the engine in its thread, while the old figure (lag beyond the baseline) reached 298 ms;
with the engine on the loop (`Runtime.in_engine_thread` returning `work(*args,
**kwargs)`), 125-227 ms (cold filter), 96-108 ms (64-NUMA bind) and 145-162 ms (the
assigner): both tests fail.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from numatopo_engine import annotations as keys
from numatopo_engine.model import NumatopologySpec

# Enough that a cold filter on the loop stalls it several times the bound.
NODES = 1000
NUMATOPOLOGIES = "numatopo.io/v1alpha1/numatopologies"
TICK = 0.01
# The goal is 100 ms; idle, the worst lag measured here is 20-60 ms (absolute figures:
# benchmarks/bench_loop_lag.py). A loaded 2-core machine stretches every wait, the engine
# thread's GIL hand-offs included, so the bound also scales with the window: a stall
# may take at most a third of it. Work on the loop stalls it for the whole window.
LAG_BOUND = 0.15
SHARE_OF_WINDOW = 1 / 3
# Loop work per wake-up, whatever the load (CPU time): the goal itself. Measured with the
# engine in its thread: 13-78 ms (the worst during a cold filter, cause not profiled);
# with the engine on the loop, a cold filter or the assigner's decision alone exceeds it.
WORK_BOUND = 0.1
NUMA64 = Path(__file__).resolve().parents[1] / "fixtures" / "topologies" / "numa64-synthetic.json"

pytestmark = [pytest.mark.timeout(240), pytest.mark.alone]


@dataclass(frozen=True, slots=True)
class Tick:
    late: float
    """How much later than asked the probe woke up."""
    busy: float
    """CPU time this process spent meanwhile, every thread's."""
    loop_work: float
    """CPU time the operator's loop thread spent meanwhile: work done on the loop."""


@dataclass
class Lag:
    ticks: list[Tick] = field(default_factory=list, repr=False)
    window: float = 0.0
    baseline: float = 0.0
    """The worst lag of an idle process's probe over the same window."""

    def bound(self) -> float:
        return max(LAG_BOUND, SHARE_OF_WINDOW * self.window)

    def attributable(self) -> float:
        """The operator loop's worst lag beyond what an idle process suffered meanwhile,
        and no longer than this process worked during it."""
        return max((min(t.late - self.baseline, t.busy) for t in self.ticks), default=0.0)

    def loop_work(self) -> float:
        """The most work done on the operator's loop between two wake-ups."""
        return max((t.loop_work for t in self.ticks), default=0.0)

    def words(self) -> str:
        worst = max(self.ticks, key=lambda t: t.late, default=Tick(0.0, 0.0, 0.0))
        return (
            f"{worst.late * 1e3:.0f} ms late, {worst.busy * 1e3:.0f} ms of CPU time in it "
            f"({self.baseline * 1e3:.0f} ms in an idle process meanwhile), at most "
            f"{self.loop_work() * 1e3:.0f} ms of work on the loop per wake-up, "
            f"in a {self.window * 1e3:.0f} ms window"
        )

    def check(self, what: str) -> None:
        assert len(self.ticks) >= 3, f"{what}: the probe never ran"
        assert self.loop_work() < WORK_BOUND, f"{what} worked on the loop: {self.words()}"
        assert self.attributable() < self.bound(), f"{what} stalled the loop: {self.words()}"


async def _probe(stop: threading.Event, lag: Lag) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        started, busy, work = loop.time(), time.process_time(), time.thread_time()
        await asyncio.sleep(TICK)
        lag.ticks.append(
            Tick(
                loop.time() - started - TICK,
                time.process_time() - busy,
                time.thread_time() - work,
            )
        )


# The baseline probe: ticks until its stdin says stop, then prints its worst lag.
_IDLE_PROBE = f"""
import select, sys, time
print("ticking", flush=True)
worst = 0.0
while True:
    started = time.monotonic()
    if select.select([sys.stdin], [], [], {TICK})[0]:
        break
    worst = max(worst, time.monotonic() - started - {TICK})
print(worst, flush=True)
"""


class LagProbe:
    """Runs `_probe` in the operator's loop, and a baseline probe in an idle process of
    its own, for the duration of a `with` block."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lag = Lag()
        self._stop = threading.Event()

    async def __aenter__(self) -> Lag:
        self._idle = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _IDLE_PROBE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self._idle.stdout is not None
        assert b"ticking\n" == await self._idle.stdout.readline()
        future = asyncio.run_coroutine_threadsafe(_probe(self._stop, self.lag), self.loop)
        self._future = asyncio.wrap_future(future)
        await asyncio.sleep(3 * TICK)  # the probes are ticking before the work starts
        self._started = time.monotonic()
        return self.lag

    async def __aexit__(self, *exc: object) -> None:
        self.lag.window = time.monotonic() - self._started
        await asyncio.sleep(3 * TICK)  # a stall at the very end is still seen
        self._stop.set()
        await self._future
        out, _ = await self._idle.communicate(b"stop\n")
        self.lag.baseline = float(out)


def numa64() -> NumatopologySpec:
    return NumatopologySpec.model_validate(json.loads(NUMA64.read_text())["spec"])


async def _quiet(running, nodes: int) -> None:
    """Wait until the operator has handled the first event of every node (kopf digests a
    list of thousands for many seconds, well after its indexes are complete) and its
    loop stays on time for a whole probe window. Only then is a stall the engine's."""
    deadline = time.monotonic() + 120
    while len(running.runtime.redriven) < nodes:
        assert time.monotonic() < deadline, "the operator did not handle every node in 120 s"
        await asyncio.sleep(0.2)
    while True:
        async with LagProbe(running.loop) as lag:
            await asyncio.sleep(0.5)
        if lag.attributable() < LAG_BOUND / 2 and lag.loop_work() < WORK_BOUND / 2:
            return
        assert time.monotonic() < deadline, "the operator's loop did not settle within 120 s"


async def test_a_big_filter_does_not_stall_the_loop(env):
    cluster, start_operator, h100, pod, topology_object, _ = env.parts()
    names = [f"gpu-{i:04d}" for i in range(NODES)]
    # Stored directly: the emulator takes minutes for 5,000 creations over HTTP. The
    # operator still lists them over HTTP, as from a real API server.
    for name in names:
        cluster.api.objects[NUMATOPOLOGIES, None, name] = topology_object(name, h100)
    # No status writes (5,000 of them at start-up) while the loop is measured.
    running = await start_operator(status_debounce_seconds=3600)
    await _quiet(running, NODES)

    for phase in ("cold", "warm"):
        job = pod(f"job-{phase}", node=None, gpus=4)
        async with LagProbe(running.loop) as lag:
            status, result = await running.post("/filter", {"Pod": job, "NodeNames": names})
            assert 200 == status
            assert NODES == len(result["NodeNames"]), result["Error"]
            status, ranked = await running.post(
                "/prioritize", {"Pod": job, "NodeNames": result["NodeNames"]}
            )
            assert 200 == status
            assert NODES == len(ranked)
        lag.check(f"{phase} filter")


async def test_64_numa_decisions_do_not_stall_the_loop(env):
    cluster, start_operator, _, pod, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object("numa64", numa64()))
    await cluster.create_node("numa64")
    bindings = cluster.emulate_binding()
    running = await start_operator()
    await _quiet(running, 1)

    # Both spread over several NUMA nodes: the engine weighs many masks of 64 nodes.
    await cluster.create_pod(pod("bound", node=None, policy="best-effort", cpu="20"))
    manifest = cluster.pods()["bound"]
    async with LagProbe(running.loop) as bind_lag:
        status, result = await running.post(
            "/bind",
            {
                "PodName": "bound",
                "PodNamespace": "default",
                "PodUID": manifest["metadata"]["uid"],
                "Node": "numa64",
            },
        )
    assert (200, {"Error": ""}) == (status, result)
    assert 1 == len(bindings)
    assert keys.ASSIGNMENT in cluster.annotations("bound")

    async with LagProbe(running.loop) as assign_lag:
        await cluster.create_pod(pod("placed", node="numa64", policy="best-effort", cpu="40"))
        await wait(
            lambda: keys.ASSIGNMENT in cluster.annotations("placed"),
            what="the assigner's decision",
            timeout=30,
        )
    assignment = json.loads(cluster.annotations("placed")[keys.ASSIGNMENT])
    assert len(assignment["numaNodes"]) > 1

    bind_lag.check("bind")
    assign_lag.check("assigner")
