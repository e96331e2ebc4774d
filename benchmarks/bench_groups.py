"""Time to place a 64-pod group over ~1,000 nodes with `place_group` (the production call).

    .venv/bin/python benchmarks/bench_groups.py [--layout 2x4x8x16] [--busy 0.4] [--repeat 7]

The cluster is `numatopo simulate --multi-node`'s generator: 2 blocks x 4 spines x 8
leaves x 16 nodes = 1,024 nodes of the Alibaba node list's 8-GPU shapes (laid out by
the shipped topology map; every node with its own name, GPU UUIDs and bus ids,
`simulation.fleet.identify`), levels `topology.k8s.aws/network-node-layer-1..3`. A share
`--busy` of the nodes (seeded) already runs a pod of 1, 2, 4 or 8 GPUs, booked with
the engine, so nodes differ in what they hold.

Rows: the group (64 pods of 8 GPUs and 16 CPUs, best-effort, required to share one
spine) placed by `place_group` with each strategy, cold (a fresh engine: hardware
tables built on the way) and warm (the engine of an earlier call), then 64 pods of
1 GPU; the baseline, measured in the same run on the same cluster, is a topology-blind
first-fit gang (`simulation.gangs.first_fit`: each pod on the first node by name whose
engine `allocate` takes it, all or nothing). Best and median of N; the ratio is
numatopo's median over the baseline's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from numatopo_cli.commands.simulate.files import node_shapes
from numatopo_engine.allocation import Engine, allocate
from numatopo_engine.annotations import PolicyName
from numatopo_engine.domains import DomainTree, Member, NodeCandidate, place_group
from numatopo_engine.groups import GroupSpec, Strategy
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.simulation.fleet import identify
from numatopo_engine.simulation.gangs import first_fit
from numatopo_engine.simulation.leafspine import LEVELS, LeafSpine, generate
from numatopo_engine.state import NodeState


def members(count: int, gpus: int, cpus: int) -> list[Member]:
    options = TopologyOptions(policy=PolicyName.BEST_EFFORT)
    container = ContainerRequest(name="main", cpu_milli=cpus * 1000, gpus=gpus)
    out = []
    for rank in range(count):
        request = PodRequest("bench", f"worker-{rank}", (container,), options=options)
        out.append(Member(request.key, rank, request))
    return out


def cluster(layout: str, busy: float, seed: int) -> tuple[DomainTree, dict[str, NodeCandidate]]:
    file = generate(LeafSpine.parse(layout), node_shapes(), seed=seed)
    generated = file.candidates()
    assert not any(c.state.assignments for c in generated.values()), "booked below"
    # Each node as its exporter publishes it: its own GPU UUIDs and bus ids.
    nodes = {
        name: NodeCandidate(spec, NodeState(spec))
        for name, shared in generated.items()
        for spec in (identify(shared.topology, name, seed=seed),)
    }
    rng = random.Random(seed)
    engine = Engine()
    for name in rng.sample(sorted(nodes), int(busy * len(nodes))):
        gpus = rng.choice([1, 2, 4, 8])
        (pod,) = members(1, gpus, gpus * 2)
        candidate = nodes[name]
        decision = allocate(candidate.topology, candidate.state, pod.request, name, engine=engine)
        candidate.state.apply(f"busy/{name}", decision.assignment)
    return file.tree(LEVELS), nodes


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * min(times), 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", default="2x4x8x16")
    parser.add_argument("--busy", type=float, default=0.4)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    tree, nodes = cluster(args.layout, args.busy, args.seed)
    print(f"{len(nodes)} nodes, {sum(len(c.topology.gpus) for c in nodes.values())} GPUs")
    big = members(64, 8, 16)
    small = members(64, 1, 2)
    by_name = sorted(nodes)
    warm = Engine()

    def numatopo(group: list[Member], strategy: Strategy, engine: Engine | None) -> object:
        spec = GroupSpec("bench", "g", len(group), LEVELS[1], None, strategy, None)
        return place_group(tree, group, nodes, spec=spec, engine=engine or Engine())

    rows: list[tuple[str, float, float]] = []
    base_engine = Engine()
    first_fit(nodes, by_name, big, base_engine)  # warm its tables like the warm rows
    baseline = timed(lambda: first_fit(nodes, by_name, big, base_engine), args.repeat)
    for strategy in Strategy:
        rows.append(
            (f"place_group 64x8 GPUs {strategy.value}, cold",
             *timed(lambda s=strategy: numatopo(big, s, None), args.repeat))
        )  # fmt: skip
        numatopo(big, strategy, warm)
        rows.append(
            (f"place_group 64x8 GPUs {strategy.value}, warm",
             *timed(lambda s=strategy: numatopo(big, s, warm), args.repeat))
        )  # fmt: skip
    numatopo(small, Strategy.CONSOLIDATED, warm)
    rows.append(
        ("place_group 64x1 GPU consolidated, warm",
         *timed(lambda: numatopo(small, Strategy.CONSOLIDATED, warm), args.repeat))
    )  # fmt: skip
    rows.append(("baseline: blind first-fit gang 64x8 GPUs, warm", *baseline))
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  {'best ms':>8}  {'median ms':>9}  {'x baseline':>10}")
    for name, best, median in rows:
        print(f"{name:{width}}  {best:8.1f}  {median:9.1f}  {median / baseline[1]:10.2f}")


if __name__ == "__main__":
    main()
