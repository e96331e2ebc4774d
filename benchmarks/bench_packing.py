"""Packing on every Alibaba trace: numatopo's node rank against best-fit, Volcano-style
NUMA scoring and the FGD simulator's published means.

Every pod list of `cluster-trace-gpu-v2023` (default, cpu*, gpushare*, gpuspec*,
multigpu*) and heavier mixes resampled from the default trace (`heavier`: the GPU pods
drawn again, with replacement and seeded by the replay's seed, so that 50 % or 70 % of
them ask for 2+ whole GPUs, or 30 % / 50 % for 8 GPUs; CPU-only pods kept) replayed on
the GPU nodes, workload scaled to 130 % of the cluster's GPUs (FGD's method), per seed.
Reported per trace (mean and spread, max - min, over seeds): GPUs allocated (% of
cluster) at 100 % and 130 % arrived, and at the first failure; FGD's published means at
the same arrived points (10 seeds, full cluster, `analysis_allo_discrete.csv`) and, from
its curve, the allocation where it first falls 1 point behind the arrived workload (its
first failure is not published).

    .venv/bin/python benchmarks/bench_packing.py --jobs 2 --results docs/packing-results.json \
        --out docs/packing.md --plot docs/img/packing.png
    .venv/bin/python benchmarks/bench_packing.py --traces default multigpu40 --sample-nodes 200

Resumable: each replay's numbers are kept in the `--results` JSON under (trace, seed,
strategy, node sample, code fingerprint); a rerun replays only what is missing, so an
interrupted run goes on where it stopped. The fingerprint of numatopo's replays hashes
the engine's sources (the rank), that of the other strategies only the simulator's;
both hash the heavier mixes' generator. Progress (replays done / total, elapsed,
estimate) goes to stderr.

Not a timed test: a full run is 3 strategies x 3 seeds x 27 traces.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import inspect
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

from numatopo_engine.simulation.layouts import parse_topology_map  # noqa: E402
from numatopo_engine.simulation.replay import simulate  # noqa: E402
from numatopo_engine.simulation.trace import (  # noqa: E402
    NodeRow,
    PodRow,
    build_workload,
    parse_node_rows,
    parse_pod_rows,
    sample_nodes,
)

DATA = REPO.parent / "shared" / "data" / "alibaba-gpu-v2023"
STRATEGIES = ("numatopo", "best-fit", "volcano-numa")
HEAVY = {
    "heavy-multi50": ("multi", 0.5),
    "heavy-multi70": ("multi", 0.7),
    "heavy-8gpu30": ("8gpu", 0.3),
    "heavy-8gpu50": ("8gpu", 0.5),
}
FGD_POLICY = "06-FGD"
# A big pod is resampled only if at least this share of the GPU nodes could host it.
HOSTABLE = 0.1


def read_pods(path: Path) -> list[PodRow]:
    with path.open() as f:
        return parse_pod_rows(csv.DictReader(f))


def heavier(
    pods: list[PodRow], nodes: list[NodeRow], kind: str, share: float, seed: int
) -> list[PodRow]:
    """GPU pods resampled (with replacement, seeded) so that `share` of them are multi-GPU
    (`multi`: 2+ whole GPUs) or 8-GPU (`8gpu`), as many GPU pods as before; CPU-only
    pods kept as they are. Big and small pods keep their own request shapes (CPUs,
    memory, GPU model), so the heavier trace is of the same family.

    Big pods are drawn only among those that at least `HOSTABLE` of the GPU nodes could
    take when empty: an 8-GPU pod with 120 CPUs fits only the 39 G3 boxes of 1,213, and
    drawn 50 times more often it fails, for every strategy at the same point, once there
    are more of them than G3s (measured: numatopo, best-fit and volcano-numa first fail
    at the same allocation on every seed); that measures the cluster, not the scheduler.
    """
    rng = random.Random(seed)
    gpu = [p for p in pods if p.num_gpu]
    enough = HOSTABLE * sum(1 for n in nodes if n.gpus)

    def hostable(pod: PodRow) -> bool:
        hosts = sum(
            1
            for n in nodes
            if n.gpus >= pod.whole_gpus
            and n.cpu_milli >= pod.cpu_milli
            and n.memory_mib >= pod.memory_mib
        )
        return hosts >= enough

    wanted = 2 if kind == "multi" else 8
    big = [p for p in gpu if p.whole_gpus >= wanted and hostable(p)]
    chosen_big = {id(p) for p in gpu if p.whole_gpus >= wanted}
    small = [p for p in gpu if id(p) not in chosen_big]
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
    nodes, pods, topology_map = load(trace, sample, seed)
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
        "sample": sample,
        "multi_gpu_pods": result.multi_gpu_pods,
        "pods": result.pods,
    }


_CACHE: dict[tuple[str, int, int], tuple[list[NodeRow], list[PodRow], Any]] = {}


def load(trace: str, sample: int, seed: int) -> tuple[list[NodeRow], list[PodRow], Any]:
    key = (trace, sample, seed if trace in HEAVY else 0)
    if key not in _CACHE:
        with (DATA / "csv" / "openb_node_list_gpu_node.csv").open() as f:
            nodes = parse_node_rows(csv.DictReader(f))
        every = nodes
        if sample:
            nodes = sample_nodes(nodes, sample, seed=42)
        if trace in HEAVY:
            kind, share = HEAVY[trace]
            default = read_pods(DATA / "csv" / "openb_pod_list_default.csv")
            pods = heavier(default, every, kind, share, seed)
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


def _by(results: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        by.setdefault((r["trace"], r["strategy"]), []).append(r)
    return by


def table(results: list[dict[str, Any]], fgd: dict[tuple[str, str], dict[str, float]]) -> str:
    """Markdown: per trace, mean ± spread (max - min) over seeds; ✓/✗ numatopo's mean
    against FGD's (@100, @130) and best-fit's (first failure, with the seeds where
    numatopo's first failure came no earlier than best-fit's on the same seed)."""
    by = _by(results)
    traces = list(dict.fromkeys(r["trace"] for r in results))
    lines = [
        "| trace | FGD @100 | numatopo @100 | best-fit @100 | volcano @100 | FGD @130 "
        "| numatopo @130 | best-fit @130 | volcano @130 | FGD 1pt-behind "
        "| numatopo @1st fail | best-fit @1st fail | volcano @1st fail "
        "| numatopo 1-NUMA / best links % | ms/pod numatopo |",
        "|" + "---|" * 15,
    ]

    def values(trace: str, strategy: str, key: str) -> list[float]:
        return [r[key] for r in by.get((trace, strategy), []) if r[key] is not None]

    def mean(trace: str, strategy: str, key: str) -> float | None:
        found = values(trace, strategy, key)
        return statistics.mean(found) if found else None

    def cell(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    def spread(trace: str, strategy: str, key: str) -> str:
        found = values(trace, strategy, key)
        if not found:
            return "-"
        text = f"{statistics.mean(found):.2f}"
        return text + (f" ±{max(found) - min(found):.2f}" if len(found) > 1 else "")

    def mark(ours: float | None, theirs: float | None) -> str:
        return "" if ours is None or theirs is None else (" ✓" if ours >= theirs else " ✗")

    def seeds_no_earlier(trace: str) -> str:
        ours = {r["seed"]: r["alloc_first_failure"] for r in by.get((trace, "numatopo"), [])}
        base = {r["seed"]: r["alloc_first_failure"] for r in by.get((trace, "best-fit"), [])}
        both = sorted(set(ours) & set(base))
        if not both:
            return ""
        return f" {sum(ours[s] >= base[s] - 1e-9 for s in both)}/{len(both)}"

    for trace in traces:
        f = fgd.get((f"openb_pod_list_{trace}", FGD_POLICY), {})
        n100, n130 = mean(trace, "numatopo", "alloc_100"), mean(trace, "numatopo", "alloc_130")
        nff = mean(trace, "numatopo", "alloc_first_failure")
        bff = mean(trace, "best-fit", "alloc_first_failure")
        align = mean(trace, "numatopo", "alignable_single_numa")
        links = mean(trace, "numatopo", "best_bandwidth")
        row = [
            trace,
            cell(f.get("100")),
            spread(trace, "numatopo", "alloc_100") + mark(n100, f.get("100")),
            spread(trace, "best-fit", "alloc_100"),
            spread(trace, "volcano-numa", "alloc_100"),
            cell(f.get("130")),
            spread(trace, "numatopo", "alloc_130") + mark(n130, f.get("130")),
            spread(trace, "best-fit", "alloc_130"),
            spread(trace, "volcano-numa", "alloc_130"),
            cell(f.get("behind")),
            spread(trace, "numatopo", "alloc_first_failure")
            + mark(nff, bff)
            + seeds_no_earlier(trace),
            spread(trace, "best-fit", "alloc_first_failure"),
            spread(trace, "volcano-numa", "alloc_first_failure"),
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


def fingerprint(strategy: str) -> str:
    """What a replay's numbers depend on: the engine's sources for numatopo (its rank),
    the simulator's for the others, and the heavier mixes' generator for all."""
    engine = REPO / "engine" / "numatopo_engine"
    files = sorted(engine.rglob("*.py")) if strategy == "numatopo" else []
    files += sorted((engine / "simulation").glob("*.py"))
    digest = hashlib.sha256()
    for path in dict.fromkeys(files):
        digest.update(path.relative_to(REPO).as_posix().encode())
        digest.update(path.read_bytes())
    digest.update(f"{inspect.getsource(heavier)}{HEAVY}{HOSTABLE}".encode())
    return digest.hexdigest()[:16]


def job_key(job: tuple[str, int, str, int], prints: dict[str, str]) -> str:
    trace, seed, strategy, sample = job
    return f"{trace}|{seed}|{strategy}|{sample or 'all'}|{prints[strategy]}"


def load_results(path: Path | None) -> dict[str, dict[str, Any]]:
    if path is None or not path.exists():
        return {}
    found = json.loads(path.read_text())
    return dict(found.get("replays", {})) if isinstance(found, dict) else {}


def save_results(path: Path | None, replays: dict[str, dict[str, Any]]) -> None:
    if path is None:
        return
    partial = path.with_suffix(path.suffix + ".tmp")
    partial.write_text(json.dumps({"replays": replays}, indent=1, sort_keys=True))
    partial.replace(path)


BEGIN, END = "<!-- bench_packing: begin -->", "<!-- bench_packing: end -->"


def write_between_markers(path: Path, text: str) -> None:
    """`text` between the BEGIN / END markers of `path` (the prose around them kept), or
    as the whole file when it has none."""
    old = path.read_text() if path.exists() else ""
    if BEGIN in old and END in old:
        head, _, rest = old.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = f"{head}{BEGIN}\n{text}{END}{tail}"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--traces", nargs="*", help="trace names (default: all, and the heavier mixes)"
    )
    parser.add_argument("--seeds", nargs="*", type=int, default=[42, 43, 44])
    parser.add_argument("--strategies", nargs="*", default=list(STRATEGIES))
    parser.add_argument("--sample-nodes", type=int, default=0, help="N random nodes (seed 42)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--data", type=Path, help="the alibaba-gpu-v2023 folder")
    parser.add_argument("--results", type=Path, help="the resumable results JSON (read, extended)")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    parser.add_argument("--plot", type=Path)
    parser.add_argument(
        "--report-only", action="store_true", help="replay nothing: table and plot of --results"
    )
    args = parser.parse_args()
    global DATA  # noqa: PLW0603 (read by the worker processes, forked after this)
    DATA = args.data or DATA
    traces = args.traces or all_traces()
    prints = {s: fingerprint(s) for s in args.strategies}
    jobs = [
        (t, seed, s, args.sample_nodes)
        for t in traces
        for seed in args.seeds
        for s in args.strategies
    ]
    replays = load_results(args.results)
    wanted = {job_key(job, prints): job for job in jobs}
    missing = [job for key, job in wanted.items() if key not in replays]
    total, started = len(missing), time.perf_counter()
    print(f"{len(jobs) - total} of {len(jobs)} replays cached; {total} to run", file=sys.stderr)
    if missing and not args.report_only:
        # The slowest first (numatopo, the largest traces), so the pool drains evenly.
        missing.sort(key=lambda j: (j[2] != "numatopo", j[0].startswith("heavy")))
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for done, r in enumerate(pool.map(run_one, missing), start=1):
                replays[job_key((r["trace"], r["seed"], r["strategy"], r["sample"]), prints)] = r
                save_results(args.results, replays)
                elapsed = time.perf_counter() - started
                left = elapsed / done * (total - done) / 60
                print(
                    f"[{done}/{total} {elapsed / 60:.1f} min, ~{left:.0f} min left] "
                    f"{r['trace']:14s} {r['seed']} {r['strategy']:13s} "
                    f"@100 {r['alloc_100']:6.2f} @130 {r['alloc_130']:6.2f} "
                    f"1st-fail {r['alloc_first_failure']:6.2f} {r['ms_per_pod']:.2f} ms/pod "
                    f"{r['seconds']:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    results = [replays[key] for key in wanted if key in replays]
    fgd = fgd_means(DATA / "fgd-simulator-expected-results" / "analysis_allo_discrete.csv")
    ran = len(results)
    header = (
        f"{ran} of {len(jobs)} replays ({', '.join(args.strategies)}; seeds "
        f"{', '.join(map(str, args.seeds))}; "
        f"{args.sample_nodes or 'all'} nodes){'' if ran == len(jobs) else ' — PARTIAL'}\n\n"
    )
    text = header + table(results, fgd)
    print(text)
    if args.out:
        write_between_markers(args.out, text)
    if args.plot and results:
        plot(results, fgd, args.plot)


if __name__ == "__main__":
    main()
