"""`numatopo simulate` (one pod per node decision): replay a GPU-cluster trace under several
placement strategies; `-o json` is `numatopo_cli.reports.simulation.SimulationReport`."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path

from numatopo_cli.commands.simulate.files import (
    DEFAULT_TRACE,
    InputError,
    csv_rows,
    pyplot,
    read_nodes,
    read_topology_dir,
    read_topology_map,
    run_replay,
    save_figure,
    strategy_names,
)
from numatopo_cli.progress import progress_bar
from numatopo_cli.render.text import Column, align_rows, column_rows, percent
from numatopo_cli.reports.simulation import simulation_report
from numatopo_engine.annotations import PolicyName
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.simulation.layouts import TopologyMapError
from numatopo_engine.simulation.metrics import StrategyResult
from numatopo_engine.simulation.mig_pool import MigPoolError, apply_mig_pool
from numatopo_engine.simulation.replay import SimulationResult, simulate
from numatopo_engine.simulation.strategies import STRATEGIES
from numatopo_engine.simulation.trace import (
    GPU_MILLI,
    Arrival,
    TraceError,
    build_workload,
    parse_pod_rows,
    sample_nodes,
)

COLUMNS: tuple[Column[StrategyResult], ...] = (
    ("STRATEGY", lambda s: s.strategy),
    ("PLACED", lambda s: str(s.placed)),
    ("FAILED", lambda s: str(s.failed)),
    ("ADMIT-FAIL", lambda s: str(s.admission_failures)),
    ("ALLOC@1ST-FAIL", lambda s: f"{s.alloc_pct_at_first_failure:.1f}%"),
    ("ALLOC-END", lambda s: f"{s.alloc_pct_final:.1f}%"),
    ("1-NUMA(ALIGNABLE)", lambda s: percent(s.alignable_single_numa_share)),
    ("BEST-LINKS", lambda s: percent(s.best_bandwidth_share)),
    ("LINK-GB/S", lambda s: "-" if s.mean_link_gbps is None else f"{s.mean_link_gbps:.1f}"),
    ("CPU-GPU-NUMA", lambda s: percent(s.cpu_gpu_colocated_share)),
    ("MS/POD", lambda s: f"{s.decision_ms_mean:.2f}"),
)


def render_table(result: SimulationResult) -> str:
    lines = align_rows(column_rows(COLUMNS, result.strategies))
    summary = (
        f"{result.nodes} nodes, {result.gpus} GPUs; {result.pods} pods arrived "
        f"({result.multi_gpu_pods} multi-GPU, {result.fractional_pods} fractional-GPU shared "
        f"on counts, {result.cpu_only_pods} CPU-only); seed {result.seed}"
    )
    return "\n".join([summary, *lines]) + "\n"


def write_plot(result: SimulationResult, path: Path) -> None:
    """Allocation ratio over arrived workload per strategy, and the alignment shares."""
    plt = pyplot()
    fig, (curve, bars) = plt.subplots(
        1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [1.1, 1]}
    )
    for s in result.strategies:
        xs = [p[0] for p in s.curve]
        ys = [p[1] for p in s.curve]
        style = (
            {"linewidth": 2.6, "color": "black"} if s.strategy == "numatopo" else {"linewidth": 1.4}
        )
        curve.plot(xs, ys, label=s.strategy, **style)
    curve.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1)
    curve.set_xlabel("arrived workload (% of cluster GPUs)")
    curve.set_ylabel("GPUs allocated (% of cluster GPUs)")
    curve.set_title("GPU allocation as the workload arrives")
    curve.set_xlim(0, max((p[0] for s in result.strategies for p in s.curve), default=100))
    curve.set_ylim(0, 100)
    curve.grid(alpha=0.3)
    curve.legend(loc="lower right", fontsize=9)
    inset = curve.inset_axes((0.08, 0.55, 0.38, 0.38))
    for line in curve.get_lines()[: len(result.strategies)]:
        style = {"color": line.get_color(), "linewidth": line.get_linewidth()}
        inset.plot(line.get_xdata(), line.get_ydata(), **style)
    inset.set_xlim(80, curve.get_xlim()[1])
    inset.set_ylim(80, 100)
    inset.set_title("zoom: 80-100%", fontsize=8)
    inset.tick_params(labelsize=7)
    inset.grid(alpha=0.3)

    metrics = (
        ("1 NUMA node\n(alignable multi-GPU)", "alignable_single_numa_share"),
        ("best link set\n(multi-GPU)", "best_bandwidth_share"),
        ("CPUs on GPUs'\nNUMA node", "cpu_gpu_colocated_share"),
    )
    width = 0.8 / max(1, len(result.strategies))
    for i, s in enumerate(result.strategies):
        values = [100 * (getattr(s, key) or 0.0) for _, key in metrics]
        xs = [m + (i - (len(result.strategies) - 1) / 2) * width for m in range(len(metrics))]
        color = "black" if s.strategy == "numatopo" else None
        bars.bar(xs, values, width=width, label=s.strategy, color=color)
    bars.set_xticks(range(len(metrics)), [label for label, _ in metrics])
    bars.set_ylabel("% of pods")
    bars.set_ylim(0, 105)
    bars.set_title("Placement alignment (placed pods)")
    bars.grid(axis="y", alpha=0.3)
    bars.legend(fontsize=8, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.suptitle(
        f"numatopo simulate: {result.pods} pods on {result.nodes} nodes / {result.gpus} GPUs "
        f"(seed {result.seed})"
    )
    save_figure(fig, path)


def _run(args: argparse.Namespace) -> SimulationResult:
    strategies = strategy_names(args.scorer, STRATEGIES)
    specs: Mapping[str, NumatopologySpec] | None = None
    topology_map = None
    if args.topology_dir is not None:
        nodes, specs = read_topology_dir(args.topology_dir)
    else:
        nodes = read_nodes(args.nodes)
        topology_map = read_topology_map(args.topology_map)
    if args.sample_nodes:
        nodes = sample_nodes(nodes, args.sample_nodes, seed=args.seed)
    if not any(n.gpus for n in nodes):
        # Every figure is a share of the cluster's GPUs: without any they would be divisions
        # by nothing (an all_node sample can draw only CPU nodes).
        drawn = f" (the {len(nodes)} drawn by --sample-nodes)" if args.sample_nodes else ""
        raise InputError(f"no GPUs on the nodes{drawn}: the replay measures GPU allocation")
    arrival = Arrival(args.arrival)
    rows, source = csv_rows(args.trace, DEFAULT_TRACE)
    pods = parse_pod_rows(rows, source=source, need_creation_time=arrival is Arrival.CREATION)
    workload = build_workload(
        pods,
        capacity_gpu_milli=sum(n.gpus for n in nodes) * GPU_MILLI,
        tune=args.tune,
        seed=args.seed,
        arrival=arrival,
    )
    if args.limit:
        workload = workload[: args.limit]
    if args.mig_pool is not None:
        if topology_map is None:
            raise InputError("--mig-pool splits nodes of the topology map, not --topology-dir")
        try:
            plan = apply_mig_pool(nodes, workload, topology_map, args.mig_pool, seed=args.seed)
        except MigPoolError as exc:
            raise InputError(str(exc)) from None
        nodes, workload, topology_map = plan.nodes, plan.workload, plan.topology_map
        args.mig_summary = plan.summary()
    return simulate(
        nodes,
        workload,
        topology_map,
        specs=specs,
        strategies=strategies,
        seed=args.seed,
        policy=PolicyName(args.policy),
        clock=time.perf_counter,
        progress=progress_bar("pods", force=args.progress),
    )


def run(args: argparse.Namespace) -> int:
    def show(result: SimulationResult) -> str:
        mig = getattr(args, "mig_summary", None)
        if args.output == "json":
            return simulation_report(result, mig).to_json()
        if mig is None:
            return render_table(result)
        return (
            f"MIG pool: {mig['nodes']} nodes split into {mig['devices']} {mig['resource']} "
            f"devices (counted as GPUs below); {mig['pods']} fractional pods ask for one\n"
            + render_table(result)
        )

    errors = (InputError, TraceError, TopologyMapError)
    return run_replay(args, _run, write_plot, errors, show)
