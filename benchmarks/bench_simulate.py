"""Time `numatopo simulate` on the default trace, one strategy at a time.

    .venv/bin/python benchmarks/bench_simulate.py [--sample-nodes N]

Prints seconds per strategy and the decision time per pod; not a timed test.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from importlib import resources

from numatopo_cli.progress import progress_bar
from numatopo_engine.simulation.layouts import parse_topology_map
from numatopo_engine.simulation.replay import simulate
from numatopo_engine.simulation.strategies import STRATEGIES
from numatopo_engine.simulation.trace import (
    build_workload,
    parse_node_rows,
    parse_pod_rows,
    sample_nodes,
)

SAMPLES = resources.files("numatopo_cli.samples.simulate")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample-nodes", type=int, default=0)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    text = SAMPLES.joinpath("openb_node_list_gpu_node.csv").read_text()
    nodes = parse_node_rows(csv.DictReader(text.splitlines()))
    if args.sample_nodes:
        nodes = sample_nodes(nodes, args.sample_nodes, seed=args.seed)
    pods = parse_pod_rows(
        csv.DictReader(SAMPLES.joinpath("openb_pod_list_default.csv").read_text().splitlines())
    )
    topology_map = parse_topology_map(json.loads(SAMPLES.joinpath("topology-map.json").read_text()))
    workload = build_workload(
        pods, capacity_gpu_milli=sum(n.gpus for n in nodes) * 1000, tune=1.3, seed=args.seed
    )
    print(f"{len(nodes)} nodes, {len(workload)} pods")
    for name in STRATEGIES:
        started = time.perf_counter()
        result = simulate(
            nodes,
            workload,
            topology_map,
            strategies=[name],
            seed=args.seed,
            clock=time.perf_counter,
            progress=progress_bar("pods"),
        )
        elapsed = time.perf_counter() - started
        s = result.strategies[0]
        print(
            f"{name:20s} {elapsed:7.2f} s  {s.decision_ms_mean:6.3f} ms/pod mean"
            f"  {s.decision_ms_p99:7.3f} ms/pod p99"
        )


if __name__ == "__main__":
    main()
