"""Engine throughput: topology-aware filter+score over many nodes vs a count-only first fit.

What a scheduler extender does per pod: evaluate the pod on every node (filter) and
score the feasible ones (prioritize), then build the assignment on the winner. The
baseline is topology-blind: per node it reads the same `NodeState` for free CPU, GPU and
memory counts and compares them with the request (first fit, but over every node so
both sides do one pass of the same shape).

Nodes are 8-GPU 2-socket machines (DGX-1 V100, 8x H100 NVSwitch, 8x L40S PCIe, from
tests/fixtures/topologies/) with mixed occupancy from a seeded RNG.

    .venv/bin/python benchmarks/bench_engine.py [--nodes 1000 5000] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "engine")]

from numatopo_engine.allocation import allocate, evaluate  # noqa: E402
from numatopo_engine.annotations import PolicyName  # noqa: E402
from numatopo_engine.errors import UnsatisfiableError  # noqa: E402
from numatopo_engine.model import Numatopology, NumatopologySpec  # noqa: E402
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions  # noqa: E402
from numatopo_engine.state import NodeState  # noqa: E402

SHAPES = ("dgx1-v100", "h100-nvswitch", "pcie-8gpu")
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


def _load(name: str) -> NumatopologySpec:
    path = REPO / "tests" / "fixtures" / "topologies" / f"{name}.json"
    return Numatopology.model_validate_json(path.read_text()).spec


def build_cluster(count: int, seed: int) -> list[tuple[NumatopologySpec, NodeState]]:
    rng = random.Random(seed)
    specs = [_load(name) for name in SHAPES]
    nodes: list[tuple[NumatopologySpec, NodeState]] = []
    for index in range(count):
        spec = specs[index % len(specs)]
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


def topology_pass(nodes: list[tuple[NumatopologySpec, NodeState]], request: PodRequest) -> int:
    best = (-1, -1)
    for index, (spec, state) in enumerate(nodes):
        try:
            score = evaluate(spec, state, request)
        except UnsatisfiableError:
            continue
        best = max(best, (score, -index))
    if best[0] >= 0:
        spec, state = nodes[-best[1]]
        allocate(spec, state, request, f"node-{-best[1]}")
    return best[0]


def count_only_pass(nodes: list[tuple[NumatopologySpec, NodeState]], request: PodRequest) -> int:
    container = request.containers[0]
    cpus, gpus, memory = container.cpu_milli // 1000, container.gpus, container.memory_bytes
    first = -1
    for index, (spec, state) in enumerate(nodes):
        fits = (
            len(state.free_gpus()) >= gpus
            and len(state.free_cpus()) >= cpus
            and sum(state.free_memory(n.id) for n in spec.numa_nodes) >= memory
        )
        if fits and first < 0:
            first = index
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(f"pod mix: {', '.join(p.name for p in MIX)}; shapes: {', '.join(SHAPES)}")
    print(f"{'nodes':>6} {'topology s':>11} {'count s':>9} {'ratio':>6} "
          f"{'topo us/node':>13} {'count us/node':>14} {'node evals/s':>13}")  # fmt: skip
    for count in args.nodes:
        nodes = build_cluster(count, args.seed)
        for request in MIX:  # warm the per-topology tables and GPU-set memo
            topology_pass(nodes[:30], request)
        started = time.perf_counter()
        for request in MIX:
            topology_pass(nodes, request)
        topology = time.perf_counter() - started
        started = time.perf_counter()
        for request in MIX:
            count_only_pass(nodes, request)
        counting = time.perf_counter() - started
        evaluations = count * len(MIX)
        print(
            f"{count:>6} {topology:>11.3f} {counting:>9.3f} {topology / counting:>6.2f} "
            f"{1e6 * topology / evaluations:>13.1f} {1e6 * counting / evaluations:>14.1f} "
            f"{evaluations / topology:>13.0f}"
        )


if __name__ == "__main__":
    main()
