"""Engine throughput: topology-aware filter+score over many nodes vs a count-only first fit.

What a scheduler extender does per pod: evaluate the pod on every node (filter) and
score the feasible ones (prioritize), keeping each refused node's reason (the summary
the extender sends; the detailed text is worded only when read), then build the
assignment on the winner. Nodes are grouped by hardware shape once per cluster, as a
ledger that keeps its groups while topologies stay would (grouping depends on topologies,
not on pods), and each group is decided in bulk (`allocation.score_many`: scores in an
array, the best node by argmax, refused nodes as (positions, summary) pairs, each keeping
a reference to its summary). The extender's `judge` still groups per call and builds a
`Refusal` per refused node (`evaluate_many`). The baseline is topology-blind
and as tight as a count-only scheduler is: per node it reads the same `NodeState`'s
O(1) free CPU, GPU and memory counters and compares them with the request (first fit,
but over every node so both sides do one pass of the same shape).

Nodes are a realistic fleet (`simulation.fleet`): half 8-GPU 2-socket machines (DGX-1
V100, 8x H100 NVSwitch, 8x L40S PCIe, AWS p4d, from tests/fixtures/topologies/), half
the Alibaba openb node list's models as `numatopo simulate` lays them out, in its
proportions; every node has its own name, GPU UUIDs and bus ids, as its exporter
publishes them, and mixed occupancy from a seeded RNG. `--no-names` gives every node
of a shape the same names (what every figure measured before fleets had names);
`names/same` is the topology pass on named nodes over the same nodes unnamed, in the
same run (goal: at most 1.2x).

`topology s` is one cold pass per pod (the engine's decision memos emptied first, so
every distinct node state is decided again; what depends only on the hardware shape and
the pod, `fast_evaluate`'s plans and GPU tables, stays built, as it is after the first
few nodes of any pass; each node's free row stays cached, as `NodeState` keeps it
until the node changes);
`repeat s` runs the same pod mix again over the unchanged nodes, as the next replicas
of the same jobs would be scheduled (memos warm: each node row's verdict is kept per
plan, `row_verdicts`, so only the winner's changed row is decided again).

    .venv/bin/python benchmarks/bench_engine.py [--nodes 1000 5000] [--seed 7]
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import random
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "engine")]

from numatopo_engine.allocation import (  # noqa: E402
    Engine,
    ShapeGroup,
    allocate,
    group_by_shape,
    score_many,
)
from numatopo_engine.annotations import PolicyName  # noqa: E402
from numatopo_engine.errors import UnsatisfiableError  # noqa: E402
from numatopo_engine.model import Numatopology, NumatopologySpec  # noqa: E402
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions  # noqa: E402
from numatopo_engine.simulation.fleet import identify, node_name  # noqa: E402
from numatopo_engine.simulation.layouts import build_node_spec, parse_topology_map  # noqa: E402
from numatopo_engine.simulation.trace import parse_node_rows  # noqa: E402
from numatopo_engine.state import NodeState  # noqa: E402

SHAPES = ("dgx1-v100", "h100-nvswitch", "pcie-8gpu", "aws-p4d")
SAMPLES = REPO / "cli" / "numatopo_cli" / "samples" / "simulate"
GiB = 2**30


def _pod(name: str, cpus: int, gpus: int, memory_gib: int, policy: PolicyName) -> PodRequest:
    container = ContainerRequest(
        name="main", cpu_milli=cpus * 1000, memory_bytes=memory_gib * GiB, gpus=gpus
    )
    return PodRequest("bench", name, (container,), options=TopologyOptions(policy=policy))


MIX = (
    _pod("1gpu", 4, 1, 16, PolicyName.BEST_EFFORT),
    _pod("2gpu", 8, 2, 32, PolicyName.BEST_EFFORT),
    _pod("4gpu-single", 16, 4, 64, PolicyName.SINGLE_NUMA_NODE),
    _pod("8gpu", 32, 8, 128, PolicyName.BEST_EFFORT),
    _pod("cpu-only", 8, 0, 16, PolicyName.RESTRICTED),
)


def _text(name: str) -> str:
    return (REPO / "tests" / "fixtures" / "topologies" / f"{name}.json").read_text()


def fleet_shapes() -> tuple[list[NumatopologySpec], list[float]]:
    """The fleet's shapes and weights: the fixture machines (half the fleet, alike) and
    the Alibaba node list's (model, GPUs, CPUs, memory) shapes in their proportions."""
    rows = parse_node_rows(
        csv.DictReader((SAMPLES / "openb_node_list_gpu_node.csv").read_text().splitlines())
    )
    layouts = parse_topology_map(json.loads((SAMPLES / "topology-map.json").read_text()))
    counted: dict[tuple[str, int, int, int], tuple[NumatopologySpec, int]] = {}
    for row in rows:
        key = (row.model, row.gpus, row.cpu_milli, row.memory_mib)
        spec, seen = counted.get(key) or (
            build_node_spec(row, layouts.layout_for(row.model, row.gpus)),
            0,
        )
        counted[key] = (spec, seen + 1)
    fixtures = [Numatopology.model_validate_json(_text(name)).spec for name in SHAPES]
    share = len(rows) / len(fixtures)
    return (
        fixtures + [spec for spec, _ in counted.values()],
        [share] * len(fixtures) + [float(n) for _, n in counted.values()],
    )


def build_cluster(
    count: int, seed: int, *, names: bool = True
) -> list[tuple[NumatopologySpec, NodeState]]:
    """`count` nodes of `fleet_shapes`, each its own spec object (with its own names
    unless `names` is False), partly booked."""
    rng = random.Random(seed)
    shapes, weights = fleet_shapes()
    texts = [json.dumps(shape.to_wire()) for shape in shapes]
    picked = random.Random(seed).choices(range(len(shapes)), weights=weights, k=count)
    nodes: list[tuple[NumatopologySpec, NodeState]] = []
    for index in range(count):
        spec = NumatopologySpec.model_validate_json(texts[picked[index]])
        if names:
            spec = identify(spec, node_name(index), seed=seed)
        state = NodeState(spec)
        for number in range(rng.randint(0, 6)):
            request = _pod(
                f"fill-{index}-{number}",
                rng.choice([2, 4, 8]),
                rng.choice([0, 1, 1, 2, 4]),
                rng.choice([8, 32]),
                PolicyName.BEST_EFFORT,
            )
            try:
                decision = allocate(spec, state, request, f"node-{index}")
            except UnsatisfiableError:
                break
            state.apply(request.key, decision.assignment)
        nodes.append((spec, state))
    return nodes


class Cluster(NamedTuple):
    """The nodes, and their shape groups as the operator's ledger would keep them:
    built once, since grouping depends on topologies, not on pods."""

    nodes: list[tuple[NumatopologySpec, NodeState]]
    groups: list[tuple[ShapeGroup, npt.NDArray[np.intp]]]  # with positions as an array
    engine: list[Engine]  # the memo tables a caller owns (one slot: replaced when cold)


def clustered(nodes: list[tuple[NumatopologySpec, NodeState]]) -> Cluster:
    engine = Engine()
    groups = group_by_shape(nodes)
    return Cluster(nodes, [(g, np.array(g.positions, dtype=np.intp)) for g in groups], [engine])


def topology_pass(cluster: Cluster, request: PodRequest) -> int:
    best = (-1, 0)
    refused: dict[int, str] = {}
    for group, positions in cluster.groups:
        scored = score_many(
            group.topology, group.states, request, checked=False, engine=cluster.engine[0]
        )
        at = int(scored.scores.argmax())  # the first best: the lowest position
        score = int(scored.scores[at])
        if score >= 0 and (score, -int(positions[at])) > best:
            best = (score, -int(positions[at]))
        for where, text in scored.refused:
            refused.update(dict.fromkeys(positions[where].tolist(), text))  # what is sent
    if best[0] >= 0:
        spec, state = cluster.nodes[-best[1]]
        allocate(spec, state, request, f"node-{-best[1]}", engine=cluster.engine[0])
    return best[0]


def count_only_pass(nodes: list[tuple[NumatopologySpec, NodeState]], request: PodRequest) -> int:
    container = request.containers[0]
    cpus, gpus, memory = container.cpu_milli // 1000, container.gpus, container.memory_bytes
    first = -1
    refused: dict[int, str] = {}
    for index, (_, state) in enumerate(nodes):
        if state.free_gpu_count() < gpus:
            refused[index] = "Insufficient GPUs"
        elif state.free_cpu_count() < cpus:
            refused[index] = "Insufficient cpu"
        elif state.free_memory_total() < memory:
            refused[index] = "Insufficient memory"
        elif first < 0:
            first = index
    return first


def _forget_decisions(cluster: Cluster) -> None:
    """A new scheduling epoch: fresh memo tables (rows stay with their nodes)."""
    cluster.engine[0] = Engine()


def _best_of(repeat: int, run: Callable[[], object], before: Callable[[], object]) -> float:
    """Best wall time of `repeat` runs, with the collector paused as `timeit` does."""
    times = []
    for _ in range(repeat):
        before()
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        finally:
            gc.enable()
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--no-names", action="store_true", help="nodes of a shape share names")
    args = parser.parse_args()
    print(f"pod mix: {', '.join(p.name for p in MIX)}; shapes: {', '.join(SHAPES)} "
          "and the Alibaba node list's")  # fmt: skip
    print(f"{'nodes':>6} {'groups':>6} {'topology s':>11} {'count s':>9} {'ratio':>6} "
          f"{'repeat s':>9} {'ratio':>6} {'topo us/node':>13} {'count us/node':>14} "
          f"{'node evals/s':>13} {'names/same':>10}")  # fmt: skip
    for count in args.nodes:
        nodes = build_cluster(count, args.seed, names=not args.no_names)
        count_only_pass(nodes, MIX[0])  # warm the interpreter on both paths
        cluster = clustered(nodes)
        topology_pass(clustered(nodes[:3]), MIX[0])
        same = clustered(build_cluster(count, args.seed, names=False))

        def topology_mix(cluster: Cluster = cluster) -> None:
            for request in MIX:
                topology_pass(cluster, request)

        def count_mix(nodes: list[tuple[NumatopologySpec, NodeState]] = nodes) -> None:
            for request in MIX:
                count_only_pass(nodes, request)

        def same_mix(cluster: Cluster = same) -> None:
            for request in MIX:
                topology_pass(cluster, request)

        forget = partial(_forget_decisions, cluster)
        topology = _best_of(args.repeat, topology_mix, forget)
        unnamed = _best_of(args.repeat, same_mix, partial(_forget_decisions, same))
        repeated = _best_of(args.repeat, topology_mix, lambda: None)
        counting = _best_of(args.repeat, count_mix, lambda: None)
        evaluations = count * len(MIX)
        print(
            f"{count:>6} {len(cluster.groups):>6} {topology:>11.3f} {counting:>9.3f} "
            f"{topology / counting:>6.2f} {repeated:>9.3f} {repeated / counting:>6.2f} "
            f"{1e6 * topology / evaluations:>13.1f} {1e6 * counting / evaluations:>14.1f} "
            f"{evaluations / topology:>13.0f} {topology / unnamed:>10.2f}"
        )


if __name__ == "__main__":
    main()
