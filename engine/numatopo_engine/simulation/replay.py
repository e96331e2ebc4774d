"""Replay a workload on a simulated cluster, once per strategy.

Each strategy gets a fresh cluster and its own seeded random stream, so its result does not depend
on which other strategies run beside it. Time is read only through the injected `clock` (the engine
stays free of clocks); without one, decision times read 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.simulation.cluster import Cluster, build_cluster
from numatopo_engine.simulation.layouts import TopologyMap
from numatopo_engine.simulation.metrics import Recorder, StrategyResult
from numatopo_engine.simulation.strategies import Outcome, Placement, Rejection, make_strategy
from numatopo_engine.simulation.trace import GPU_MILLI, NodeRow, PodRow

Progress = Callable[[int, int], None]


@dataclass
class SimulationResult:
    nodes: int
    gpus: int
    pods: int
    fractional_pods: int
    cpu_only_pods: int
    multi_gpu_pods: int
    seed: int
    strategies: list[StrategyResult] = field(default_factory=list)


def book_placement(cluster: Cluster, pod: PodRow, placed: Placement) -> None:
    """Book `placed` on its node's counts and engine state (strategies follow in `booked`)."""
    node = cluster.nodes[placed.node]
    if node.state is not None:
        if placed.assignment is not None:
            key, copy = f"simulate/{pod.name}", len(node.state.assignments)
            while key in node.state.assignments:
                # Names repeat (pods of several namespaces, a trace's own copies), and applying
                # under a held key would replace that pod, freeing what it still holds.
                key, copy = f"simulate/{pod.name}#{copy}", copy + 1
            node.state.apply(key, placed.assignment)
        elif pod.fractional and node.gpu_free[placed.gpus[0]] == GPU_MILLI:
            # A GPU that starts being shared is no longer whole: the engine must not hand it out.
            share = ContainerAssignment(gpu_indices=list(placed.gpus))
            key = f"simulate/shared-gpu-{placed.gpus[0]}"
            node.state.apply(key, Assignment(node=node.name, containers={"shared": share}))
    cluster.book(placed.node, pod, gpus=placed.gpus, exclusive_cpus=placed.exclusive_cpus)


def simulate(
    nodes: Sequence[NodeRow],
    workload: Sequence[PodRow],
    topology_map: TopologyMap | None,
    *,
    specs: Mapping[str, NumatopologySpec] | None = None,
    strategies: Sequence[str],
    seed: int,
    policy: PolicyName = PolicyName.BEST_EFFORT,
    clock: Callable[[], float] | None = None,
    progress: Progress | None = None,
) -> SimulationResult:
    """Replay `workload` (in arrival order) on `nodes` (hardware from `specs` or `topology_map`)
    under each strategy; `progress(done, total)` every few hundred pods."""
    result = SimulationResult(
        nodes=len(nodes),
        gpus=sum(n.gpus for n in nodes),
        pods=len(workload),
        fractional_pods=sum(p.fractional for p in workload),
        cpu_only_pods=sum(p.num_gpu == 0 for p in workload),
        multi_gpu_pods=sum(p.whole_gpus >= 2 for p in workload),
        seed=seed,
    )
    now = clock or (lambda: 0.0)
    done, total = 0, len(workload) * len(strategies)
    for name in strategies:
        strategy = make_strategy(name, seed=seed, policy=policy)
        cluster = build_cluster(
            nodes, topology_map, specs=specs, with_engine_state=name == "numatopo"
        )
        recorder = Recorder(name, cluster)
        strategy.start(cluster, workload)
        for pod in workload:
            started = now()
            found = cluster.candidates(pod)
            outcome: Outcome = (
                strategy.place(cluster, pod, found) if found else Rejection(False, "no node fits")
            )
            if isinstance(outcome, Placement):
                book_placement(cluster, pod, outcome)
                strategy.booked(cluster, outcome)
            recorder.record(pod, outcome, now() - started)
            done += 1
            if progress is not None and done % 256 == 0:
                progress(done, total)
        result.strategies.append(recorder.finish())
    if progress is not None:
        progress(total, total)
    return result
