"""`numatopo simulate --multi-node`: multi-node jobs on a synthetic leaf/spine cluster; `-o json`
is `numatopo_cli.reports.simulation.GangSimulationReport`.

The cluster (`--layout BLOCKSxSPINESxLEAVESxNODES`) is built from the 8-GPU node shapes of the
node list (`--nodes`, default the shipped Alibaba list, laid out by `--topology-map`) or from
Numatopology JSON files (`--topology-dir`, one shape each). Job sizes follow a Helios cluster's
GPU-demand CDF (`--sizes`); the model, strategies and metrics: `numatopo_engine.simulation.gangs`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from numatopo_cli.commands.simulate.files import (
    InputError,
    node_shapes,
    pyplot,
    read_topology_dir,
    run_replay,
    save_figure,
    strategy_names,
)
from numatopo_cli.progress import progress_bar
from numatopo_cli.render.text import Column, align_rows, column_rows, percent
from numatopo_cli.reports.simulation import gang_report
from numatopo_engine.annotations import PolicyName
from numatopo_engine.network_topology import HOSTNAME_LABEL
from numatopo_engine.simulation.gangs import (
    GANG_STRATEGIES,
    HELIOS_GPU_CDF,
    GangResult,
    GangStrategyResult,
    GroupOptions,
    draw_jobs,
    simulate_gangs,
)
from numatopo_engine.simulation.leafspine import LEVELS, LeafSpine, NodeShapeWeight, generate

NODE_GPUS = 8
LEVEL_NAMES = {"block": LEVELS[0], "spine": LEVELS[1], "leaf": LEVELS[2]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument_group("multi-node jobs (--multi-node)").add_argument
    add(
        "--multi-node", action="store_true", help="simulate multi-node jobs on a leaf/spine cluster"
    )
    add(
        "--layout", default="2x2x4x8", metavar="BxSxLxN",
        help="blocks x spines per block x leaves per spine x nodes per leaf (default 2x2x4x8)",
    )  # fmt: skip
    add("--jobs", type=int, default=1000, help="jobs that arrive (default 1000)")
    add("--load", type=float, default=0.9, help="offered load, share of the GPUs (default 0.9)")
    add(
        "--sizes", default="venus", choices=sorted(HELIOS_GPU_CDF),
        help="the Helios cluster whose job GPU-demand CDF sizes the jobs (default venus)",
    )  # fmt: skip
    add(
        "--required", default="spine", choices=sorted(LEVEL_NAMES),
        help="the level a multi-node job must share one domain of (default spine)",
    )  # fmt: skip
    add(
        "--preferred", choices=sorted(LEVEL_NAMES),
        help="numatopo's multi-node jobs prefer one domain of this level instead of "
        "requiring --required (numatopo.io/topology-preferred)",
    )  # fmt: skip
    add(
        "--max-per-domain", metavar="LEVEL=N",
        help="numatopo's multi-node jobs take at most N pods per domain of LEVEL (block, "
        "spine, leaf or node; numatopo.io/max-members-per-domain)",
    )  # fmt: skip
    add(
        "--slice", metavar="LEVEL=N",
        help="numatopo's multi-node jobs whose pod count N divides are slices of N "
        "consecutive ranks, each in one domain of LEVEL (numatopo.io/slice)",
    )  # fmt: skip
    add(
        "--write-cluster", type=Path, metavar="F.json",
        help="write the generated (empty) cluster file, for `numatopo domains --cluster`",
    )  # fmt: skip


def _shapes(args: argparse.Namespace) -> list[NodeShapeWeight]:
    if args.topology_dir is not None:
        _, specs = read_topology_dir(args.topology_dir)
        chosen = [(name, spec) for name, spec in sorted(specs.items()) if spec.gpus]
        if not chosen:
            raise InputError(f"--topology-dir {args.topology_dir}: no node with GPUs")
        return [NodeShapeWeight(name, spec, 1.0) for name, spec in chosen]
    return node_shapes(args.nodes, args.topology_map, gpus=NODE_GPUS)


def simulate_from_args(args: argparse.Namespace) -> GangResult:
    try:
        layout = LeafSpine.parse(args.layout)
    except ValueError as exc:
        raise InputError(f"--layout: {exc}") from None
    if args.jobs <= 0 or not 0 < args.load <= 10:
        raise InputError("--jobs must be positive and --load in (0, 10]")
    strategies = strategy_names(args.scorer, GANG_STRATEGIES, hint="with --multi-node ")
    cluster = generate(layout, _shapes(args), seed=args.seed)
    if args.write_cluster is not None:
        try:
            args.write_cluster.write_text(json.dumps(cluster.to_wire()), encoding="utf-8")
        except OSError as exc:
            raise InputError(f"--write-cluster: {exc.strerror or exc}") from None
    gpus = sum(len(cluster.shapes[n.shape].gpus) for n in cluster.nodes)
    node_gpus = max(len(spec.gpus) for spec in cluster.shapes.values())
    jobs = draw_jobs(
        args.jobs, cdf=HELIOS_GPU_CDF[args.sizes], node_gpus=node_gpus, cluster_gpus=gpus,
        load=args.load, seed=args.seed,
    )  # fmt: skip
    options = GroupOptions(
        preferred=LEVEL_NAMES[args.preferred] if args.preferred else None,
        most_per_domain=_level_count("--max-per-domain", args.max_per_domain),
        slice=_level_count("--slice", args.slice),
    )
    return simulate_gangs(
        cluster, LEVELS, jobs, required=LEVEL_NAMES[args.required], strategies=strategies,
        policy=PolicyName(args.policy), sizes=f"helios-{args.sizes}", load=args.load,
        seed=args.seed, clock=time.perf_counter, options=options,
        progress=progress_bar("jobs", force=args.progress),
    )  # fmt: skip


def _level_count(flag: str, text: str | None) -> tuple[str, int] | None:
    """`LEVEL=N` with LEVEL block, spine, leaf or node."""
    if text is None:
        return None
    name, _, count = text.partition("=")
    levels = {**LEVEL_NAMES, "node": HOSTNAME_LABEL}
    if name not in levels or not count.isdigit() or int(count) < 1:
        raise InputError(f"{flag} {text!r}: expected LEVEL=N, LEVEL one of {', '.join(levels)}")
    return levels[name], int(count)


COLUMNS: tuple[Column[GangStrategyResult], ...] = (
    ("STRATEGY", lambda s: s.strategy),
    ("PLACED", lambda s: f"{s.placed}/{s.jobs}"),
    ("MULTI-NODE", lambda s: f"{s.multi_node_placed}/{s.multi_node_jobs}"),
    ("ONE-LEAF", lambda s: percent(s.one_leaf_share)),
    ("IN-REQUIRED", lambda s: percent(s.required_domain_share)),
    ("HOPS", lambda s: "-" if s.mean_neighbour_hops is None else f"{s.mean_neighbour_hops:.2f}"),
    ("LEAF-FRAG", lambda s: f"{s.leaf_fragmentation:.3f}"),
    ("WAIT", lambda s: f"{s.mean_wait:.3f}"),
    ("MULTI-WAIT", lambda s: f"{s.multi_node_mean_wait:.3f}"),
    ("MS/JOB", lambda s: f"{s.place_ms_mean:.1f}"),
    ("P99-MS", lambda s: f"{s.place_ms_p99:.1f}"),
)


def render_table(result: GangResult) -> str:
    lines = align_rows(column_rows(COLUMNS, result.strategies)) + _options_lines(result)
    summary = (
        f"{result.nodes} nodes, {result.gpus} GPUs, levels {' > '.join(result.levels)}; "
        f"{result.jobs} jobs sized by {result.sizes} (GPUs: jobs "
        + ", ".join(f"{g}:{n}" for g, n in result.size_histogram.items())
        + f"), load {result.load}, seed {result.seed}"
        + (
            f"; {result.too_big} that fit no required domain of the empty cluster left out"
            if result.too_big
            else ""
        )
    )
    return "\n".join([summary, *lines]) + "\n"


def _options_lines(result: GangResult) -> list[str]:
    """With group options: per strategy, how its multi-node jobs kept them."""
    out = []
    for s in result.strategies:
        said = []
        if s.preferred_domain_share is not None:
            said.append(f"in one preferred domain {percent(s.preferred_domain_share)}")
        if s.kept_share is not None:
            said.append(f"cap and slices kept {percent(s.kept_share)}")
        if said:
            out.append(f"{s.strategy}: " + ", ".join(said) + " of placed multi-node jobs")
    return out


def write_plot(result: GangResult, path: Path) -> None:
    plt = pyplot()
    panels = (
        (
            "multi-node jobs in one leaf (%)\n(of jobs no larger than a leaf)",
            "one_leaf_share",
            100.0,
        ),
        ("mean hops between\nneighbouring ranks", "mean_neighbour_hops", 1.0),
        ("leaf-level domain\nfragmentation", "leaf_fragmentation", 1.0),
        ("mean wait of multi-node jobs\n(mean run times)", "multi_node_mean_wait", 1.0),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.2))
    names = [s.strategy for s in result.strategies]
    for ax, (title, key, scale) in zip(axes, panels, strict=True):
        values = [scale * (getattr(s, key) or 0.0) for s in result.strategies]
        colours = ["black" if n == "numatopo" else "#8fa8c8" for n in names]
        bars = ax.bar(names, values, color=colours)
        ax.bar_label(bars, fmt="%.2f" if scale == 1.0 else "%.1f", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(axis="x", labelsize=9)
    fig.suptitle(
        f"numatopo simulate --multi-node: {result.jobs} jobs ({result.sizes}) on "
        f"{result.nodes} nodes / {result.gpus} GPUs, load {result.load}, seed {result.seed}"
    )
    save_figure(fig, path)


def run(args: argparse.Namespace) -> int:
    def show(result: GangResult) -> str:
        return gang_report(result).to_json() if args.output == "json" else render_table(result)

    return run_replay(args, simulate_from_args, write_plot, (InputError, ValueError), show)
