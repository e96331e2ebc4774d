"""What one export write costs the operator's event loop, against the status write it
already makes for the same node (the baseline, measured in the same run).

Per fixture topology (tests/fixtures/topologies), published as a node of a real fleet
would publish it (its own name, GPU UUIDs and bus ids: `simulation.fleet.identify`) and
half-booked by real assignments: the time to build the NodeResourceTopology and the
Volcano Numatopology and their digests (`ExportFormat.build` + `content_digest`, what
`ExportWriter.sync` runs per changed node; the wire dict is made only for a write), and
the time of `status.free_status` (the Numatopology status of the same node). Median of
`--repeat` runs.

Then whole fleets (`--fleet`, default 500 and 5,000 nodes): the realistic fleet of
`bench_engine.fleet_shapes` (fixture machines and the Alibaba node list's models), every
node named and half-booked; one pass over every node (what a resync writes when a
format is switched on or the operator starts), best of `--fleet-repeat`, per format.

    .venv/bin/python benchmarks/bench_exports.py --repeat 30 [--fleet 500 5000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / p) for p in ("engine", "kube", "operator", "cli", "benchmarks")]

from bench_engine import fleet_shapes  # noqa: E402
from numatopo_cli.progress import progress_bar  # noqa: E402
from numatopo_engine.annotations import Assignment, ContainerAssignment  # noqa: E402
from numatopo_engine.cpuset import CPUSet  # noqa: E402
from numatopo_engine.model import Numatopology, NumatopologySpec  # noqa: E402
from numatopo_engine.simulation.fleet import build_fleet, identify, node_name  # noqa: E402
from numatopo_engine.state import NodeState  # noqa: E402
from numatopo_operator.exports import ExportFormat, content_digest  # noqa: E402
from numatopo_operator.status import free_status  # noqa: E402

TOPOLOGIES = REPO / "tests" / "fixtures" / "topologies"


def half_booked(spec: NumatopologySpec, name: str) -> NodeState:
    """Every NUMA node gives half its CPUs, half its GPUs and a GiB to one pod each."""
    state = NodeState(spec)
    for node in spec.numa_nodes:
        free = sorted(set(node.cpus) - set(spec.reserved_cpus))
        gpus = [g.index for g in spec.gpus if g.numa == node.id]
        container = ContainerAssignment(
            cpus=CPUSet(free[: len(free) // 2]),
            mems=CPUSet([node.id]),
            gpu_indices=gpus[: len(gpus) // 2],
            memory={str(node.id): min(1 << 30, node.memory_bytes)},
        )
        state.apply(f"bench/pod-{node.id}", Assignment(node=name, containers={"main": container}))
    return state


def median_ms(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def row(path: Path, index: int, repeat: int) -> str:
    name = node_name(index)
    spec = identify(Numatopology.model_validate_json(path.read_text()).spec, name)
    state = half_booked(spec, name)
    base = median_ms(lambda: free_status(spec, state, len(state.assignments)), repeat)
    nrt = median_ms(lambda: content_digest(ExportFormat.NRT.build(name, spec, state)), repeat)
    vol = median_ms(lambda: content_digest(ExportFormat.VOLCANO.build(name, spec, state)), repeat)
    return (
        f"| {path.stem} | {len(spec.numa_nodes)} | {len(spec.online_cpus())} | {base:.2f} "
        f"| {nrt:.2f} | {vol:.2f} | {nrt / base:.1f}x | {vol / base:.1f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--fleet", type=int, nargs="*", default=[500, 5000])
    parser.add_argument("--fleet-repeat", type=int, default=3)
    args = parser.parse_args()
    print("| topology | NUMA | CPUs | status ms (baseline) | NRT ms | Volcano ms | NRT | Volcano |")
    print("|---|---|---|---|---|---|---|---|")
    paths = sorted(TOPOLOGIES.glob("*.json"))
    bar = progress_bar("topologies")
    for done, path in enumerate(paths, start=1):
        print(row(path, done, args.repeat), flush=True)
        if bar is not None:
            bar(done, len(paths))
    if args.fleet:
        print()
        print("| fleet | status ms (baseline) | NRT ms | Volcano ms | NRT | Volcano |")
        print("|---|---|---|---|---|---|")
    for count in args.fleet:
        print(fleet_row(count, args.fleet_repeat), flush=True)


def fleet_row(count: int, repeat: int) -> str:
    shapes, weights = fleet_shapes()
    nodes = [
        (node.name, node.spec, half_booked(node.spec, node.name))
        for node in build_fleet(shapes, count, seed=7, weights=weights)
    ]

    def best_pass_ms(one: Callable[[str, NumatopologySpec, NodeState], object]) -> float:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            for name, spec, state in nodes:
                one(name, spec, state)
            times.append(time.perf_counter() - start)
        return min(times) * 1000

    base = best_pass_ms(lambda _, spec, state: free_status(spec, state, len(state.assignments)))
    nrt = best_pass_ms(
        lambda name, spec, state: content_digest(ExportFormat.NRT.build(name, spec, state))
    )
    vol = best_pass_ms(
        lambda name, spec, state: content_digest(ExportFormat.VOLCANO.build(name, spec, state))
    )
    return (
        f"| {count} nodes, {len(shapes)} shapes | {base:.0f} | {nrt:.0f} | {vol:.0f} "
        f"| {nrt / base:.1f}x | {vol / base:.1f}x |"
    )


if __name__ == "__main__":
    main()
