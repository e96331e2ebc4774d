"""Packing on every Alibaba trace: numatopo's node rank against best-fit, Volcano-style
NUMA scoring and the FGD simulator's published means.

Every pod list of `cluster-trace-gpu-v2023` (default, cpu*, gpushare*, gpuspec*,
multigpu*) and three heavier mixes built from the default trace (GPU pods resampled
so that 50 % or 70 % of them ask for 2+ whole GPUs, or 30 % for 8 GPUs) replayed on the
1,213 GPU nodes, workload scaled to 130 % of the cluster's GPUs (FGD's method), per seed.
Reported per trace (mean over seeds): GPUs allocated (% of cluster) at 100 % and 130 %
arrived, and at the first failure; FGD's published means at the same arrived points
(10 seeds, `analysis_allo_discrete.csv`) and, from its curve, the allocation where it
first falls 1 point behind the arrived workload (its first failure is not published).

    .venv/bin/python benchmarks/bench_packing.py --jobs 2 --out docs/packing.md \
        --plot docs/img/packing.png
    .venv/bin/python benchmarks/bench_packing.py --traces default multigpu40 --sample-nodes 200

Not a timed test: a full run is ~30 replays per trace.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "engine")]

from numatopo_engine.simulation import (  # noqa: E402
    NodeRow,
    PodRow,
    build_workload,
    parse_node_rows,
    parse_pod_rows,
    parse_topology_map,
    sample_nodes,
    simulate,
)

DATA = REPO.parent / "shared" / "data" / "alibaba-gpu-v2023"
STRATEGIES = ("numatopo", "best-fit", "volcano-numa")
HEAVY = {
    "heavy-multi50": ("multi", 0.5),
    "heavy-multi70": ("multi", 0.7),
    "heavy-8gpu30": ("8gpu", 0.3),
}
FGD_POLICY = "06-FGD"


def read_pods(path: Path) -> list[PodRow]:
    with path.open() as f:
        return parse_pod_rows(csv.DictReader(f))


def heavier(pods: list[PodRow], kind: str, share: float, seed: int = 0) -> list[PodRow]:
    """GPU pods resampled (with replacement, seeded) so that `share` of them are multi-GPU
    (`multi`: 2+ whole GPUs) or 8-GPU (`8gpu`); CPU-only pods kept as they are."""
    rng = random.Random(seed)
    gpu = [p for p in pods if p.num_gpu]
    big = [p for p in gpu if (p.whole_gpus >= 2 if kind == "multi" else p.whole_gpus >= 8)]
    small = [p for p in gpu if p not in set(big)]
    count = len(gpu)
    n_big = round(share * count)
    chosen = [rng.choice(big) for _ in range(n_big)] + [
        rng.choice(small) for _ in range(count - n_big)
    ]
    out = [p for p in pods if not p.num_gpu]
    out += [replace(p, name=f"{p.name}-r{i}") for i, p in enumerate(chosen)]
    return out


def fgd_means(csv_path: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(workload, policy) -> mean over seeds of allocation at 100 / 130 arrived, and the
    allocation where the curve first falls 1 point behind the arrived %."""
    rows: dict[tuple[str, str], list[dict[str, str]]] = {}
    with csv_path.open() as f:
        for row in csv.DictReader(f):
            rows.setdefault((row["workload"], row["sc_policy"]), []).append(row)
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key, found in rows.items():
        behind = []
        for row in found:
            points = [(p, float(row[str(p)])) for p in range(1, 131)]
            behind.append(next((a for p, a in points if a < p - 1), points[-1][1]))
        out[key] = {
            "100": statistics.mean(float(r["100"]) for r in found),
            "130": statistics.mean(float(r["130"]) for r in found),
            "behind": statistics.mean(behind),
        }
    return out


def run_one(job: tuple[str, int, str, int]) -> dict[str, Any]:
    trace, seed, strategy, sample = job
    nodes, pods, topology_map = load(trace, sample)
    workload = build_workload(
        pods, capacity_gpu_milli=sum(n.gpus for n in nodes) * 1000, tune=1.3, seed=seed
    )
    started = time.perf_counter()
    result = simulate(
        nodes, workload, topology_map, strategies=[strategy], seed=seed, clock=time.perf_counter
    )
    s = result.strategies[0]
    curve = {int(x): y for x, y in s.curve}
    return {
        "trace": trace,
        "seed": seed,
        "strategy": strategy,
        "alloc_100": curve.get(100, max(curve.values())),
        "alloc_130": curve.get(130, s.alloc_pct_final),
        "alloc_first_failure": s.alloc_pct_at_first_failure,
        "alignable_single_numa": s.alignable_single_numa_share,
        "best_bandwidth": s.best_bandwidth_share,
        "ms_per_pod": s.decision_ms_mean,
        "seconds": time.perf_counter() - started,
        "multi_gpu_pods": result.multi_gpu_pods,
        "pods": result.pods,
    }


_CACHE: dict[tuple[str, int], tuple[list[NodeRow], list[PodRow], Any]] = {}


def load(trace: str, sample: int) -> tuple[list[NodeRow], list[PodRow], Any]:
    key = (trace, sample)
    if key not in _CACHE:
        with (DATA / "csv" / "openb_node_list_gpu_node.csv").open() as f:
            nodes = parse_node_rows(csv.DictReader(f))
        if sample:
            nodes = sample_nodes(nodes, sample, seed=42)
        if trace in HEAVY:
            kind, share = HEAVY[trace]
            pods = heavier(read_pods(DATA / "csv" / "openb_pod_list_default.csv"), kind, share)
        else:
            pods = read_pods(DATA / "csv" / f"openb_pod_list_{trace}.csv")
        text = resources.files("numatopo_cli.samples.simulate").joinpath("topology-map.json")
        _CACHE[key] = (nodes, pods, parse_topology_map(json.loads(text.read_text())))
    return _CACHE[key]


def all_traces() -> list[str]:
    names = sorted(
        p.stem.removeprefix("openb_pod_list_") for p in (DATA / "csv").glob("openb_pod_list_*.csv")
    )
    order = ("default", "cpu", "gpushare", "gpuspec", "multigpu")
    return sorted(
        names, key=lambda n: (next(i for i, o in enumerate(order) if n.startswith(o)), n)
    ) + list(HEAVY)


def table(results: list[dict[str, Any]], fgd: dict[tuple[str, str], dict[str, float]]) -> str:
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        by.setdefault((r["trace"], r["strategy"]), []).append(r)
    traces = list(dict.fromkeys(r["trace"] for r in results))
    lines = [
        "| trace | FGD @100 | numatopo @100 | best-fit @100 | volcano @100 | FGD @130 "
        "| numatopo @130 | best-fit @130 | volcano @130 | FGD 1pt-behind "
        "| numatopo @1st fail | best-fit @1st fail | volcano @1st fail "
        "| numatopo 1-NUMA / best links % | ms/pod numatopo |",
        "|" + "---|" * 15,
    ]

    def mean(trace: str, strategy: str, key: str) -> float | None:
        found = [r[key] for r in by.get((trace, strategy), []) if r[key] is not None]
        return statistics.mean(found) if found else None

    def cell(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for trace in traces:
        f = fgd.get((f"openb_pod_list_{trace}", FGD_POLICY), {})
        n100, n130 = mean(trace, "numatopo", "alloc_100"), mean(trace, "numatopo", "alloc_130")
        mark100 = "" if n100 is None or not f else (" ✓" if n100 >= f["100"] else " ✗")
        mark130 = "" if n130 is None or not f else (" ✓" if n130 >= f["130"] else " ✗")
        nff, bff = (
            mean(trace, "numatopo", "alloc_first_failure"),
            mean(trace, "best-fit", "alloc_first_failure"),
        )
        markff = "" if nff is None or bff is None else (" ✓" if nff >= bff else " ✗")
        align = mean(trace, "numatopo", "alignable_single_numa")
        links = mean(trace, "numatopo", "best_bandwidth")
        row = [
            trace,
            cell(f.get("100")),
            cell(n100) + mark100,
            cell(mean(trace, "best-fit", "alloc_100")),
            cell(mean(trace, "volcano-numa", "alloc_100")),
            cell(f.get("130")),
            cell(n130) + mark130,
            cell(mean(trace, "best-fit", "alloc_130")),
            cell(mean(trace, "volcano-numa", "alloc_130")),
            cell(f.get("behind")),
            cell(nff) + markff,
            cell(bff),
            cell(mean(trace, "volcano-numa", "alloc_first_failure")),
            f"{cell(None if align is None else 100 * align, 1)} / "
            f"{cell(None if links is None else 100 * links, 1)}",
            cell(mean(trace, "numatopo", "ms_per_pod")),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot(
    results: list[dict[str, Any]], fgd: dict[tuple[str, str], dict[str, float]], path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(dict.fromkeys(r["trace"] for r in results))
    fig, axes = plt.subplots(2, 1, figsize=(max(8, len(traces) * 0.55), 7), sharex=True)
    for ax, key, label in (
        (axes[0], "alloc_130", "@130 % arrived"),
        (axes[1], "alloc_first_failure", "at first failure"),
    ):
        for offset, strategy in zip((-0.2, 0.0, 0.2), STRATEGIES, strict=True):
            ys = [
                statistics.mean(
                    [r[key] for r in results if r["trace"] == t and r["strategy"] == strategy]
                    or [0]
                )
                for t in traces
            ]
            ax.bar([i + offset for i in range(len(traces))], ys, width=0.2, label=strategy)
        if key == "alloc_130":
            ys = [
                fgd.get((f"openb_pod_list_{t}", FGD_POLICY), {}).get("130", float("nan"))
                for t in traces
            ]
            ax.plot(range(len(traces)), ys, "k_", markersize=14, label="FGD (published mean)")
        ax.set_ylim(60, 100)
        ax.set_ylabel(f"GPUs allocated %\n{label}")
        ax.legend(fontsize=7, ncol=4, loc="lower left")
    axes[1].set_xticks(range(len(traces)), traces, rotation=60, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--traces", nargs="*", help="trace names (default: all, and the heavier mixes)"
    )
    parser.add_argument("--seeds", nargs="*", type=int, default=[42, 43, 44])
    parser.add_argument("--strategies", nargs="*", default=list(STRATEGIES))
    parser.add_argument("--sample-nodes", type=int, default=0, help="N random nodes (development)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--data", type=Path, help="the alibaba-gpu-v2023 folder")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    parser.add_argument("--json", type=Path, help="write every replay's numbers here")
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    global DATA  # noqa: PLW0603 (read by the worker processes, forked after this)
    DATA = args.data or DATA
    traces = args.traces or all_traces()
    jobs = [
        (t, seed, s, args.sample_nodes)
        for t in traces
        for seed in args.seeds
        for s in args.strategies
    ]
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for r in pool.map(run_one, jobs):
            results.append(r)
            print(
                f"{r['trace']:16s} {r['seed']} {r['strategy']:14s} @100 {r['alloc_100']:6.2f} "
                f"@130 {r['alloc_130']:6.2f} 1st-fail {r['alloc_first_failure']:6.2f} "
                f"{r['ms_per_pod']:.3f} ms/pod {r['seconds']:.0f} s",
                flush=True,
            )
    fgd = fgd_means(DATA / "fgd-simulator-expected-results" / "analysis_allo_discrete.csv")
    text = table(results, fgd)
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, fgd, args.plot)


if __name__ == "__main__":
    main()
