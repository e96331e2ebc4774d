"""`numatopo simulate`: replay a GPU-cluster trace under several placement strategies.

Defaults replay the Alibaba PAI GPU trace 2023 (`openb_pod_list_default.csv` on the
1,213-node `openb_node_list_gpu_node.csv`, shipped with numatopo) the way the FGD
simulator does (workload scaled to 1.3x the cluster's GPUs, shuffled arrival, seed
42), with every strategy. See `numatopo_engine.simulation.metrics` for the JSON keys.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from numatopo_cli.progress import progress_bar
from numatopo_engine.annotations import PolicyName
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.simulation import (
    STRATEGIES,
    Arrival,
    NodeRow,
    SimulationResult,
    TopologyMapError,
    TraceError,
    build_workload,
    parse_node_rows,
    parse_pod_rows,
    parse_topology_map,
    sample_nodes,
    simulate,
)
from numatopo_engine.simulation.leafspine import NodeShapeWeight, shapes_from_rows
from numatopo_engine.simulation.mig_pool import (
    MigPool,
    MigPoolError,
    apply_mig_pool,
    parse_mig_pool,
)
from numatopo_engine.simulation.trace import GPU_MILLI

SAMPLES = "numatopo_cli.samples.simulate"
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_TRACE = "openb_pod_list_default.csv"
DEFAULT_MAP = "topology-map.json"


class InputError(Exception):
    """Bad input the user can fix; printed without a traceback."""


def _open_text(path: Path | None, sample: str) -> str:
    if path is None:
        return resources.files(SAMPLES).joinpath(sample).read_text(encoding="utf-8")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(text.splitlines()))


def default_shapes(gpus: int = 8) -> list[NodeShapeWeight]:
    """The node shapes with `gpus` GPUs of the shipped node list, laid out by the
    shipped topology map, weighed by their node counts (multi-node clusters)."""
    rows = parse_node_rows(_csv_rows(_open_text(None, DEFAULT_NODES)))
    topology_map = parse_topology_map(json.loads(_open_text(None, DEFAULT_MAP)))
    return shapes_from_rows(rows, topology_map, gpus=gpus)


def _read_topology_dir(directory: Path) -> tuple[list[NodeRow], dict[str, NumatopologySpec]]:
    """Numatopology JSON files (what `numatopo inspect -o json` prints), one node each."""
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not files:
        raise InputError(f"--topology-dir {directory}: no *.json files there")
    rows: list[NodeRow] = []
    specs: dict[str, NumatopologySpec] = {}
    for path in files:
        try:
            obj = Numatopology.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError) as exc:
            first = str(exc).splitlines()[0]
            raise InputError(f"{path}: not a Numatopology object ({first})") from None
        spec = obj.spec
        rows.append(
            NodeRow(
                name=obj.metadata.name,
                cpu_milli=spec.capacity.cpus * 1000,
                memory_mib=spec.capacity.memory_bytes >> 20,
                gpus=len(spec.gpus),
                model=spec.gpus[0].model if spec.gpus else "",
            )
        )
        specs[obj.metadata.name] = spec
    return rows, specs


def _strategies(values: Sequence[str] | None) -> list[str]:
    if not values:
        return list(STRATEGIES)
    names: list[str] = []
    for value in values:
        for raw in value.split(","):
            name = raw.strip()
            if name not in STRATEGIES:
                raise InputError(f"--scorer {name!r}: choose from {', '.join(STRATEGIES)}")
            if name not in names:
                names.append(name)
    return names


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render_table(result: SimulationResult) -> str:
    header = (
        "STRATEGY",
        "PLACED",
        "FAILED",
        "ADMIT-FAIL",
        "ALLOC@1ST-FAIL",
        "ALLOC-END",
        "1-NUMA(ALIGNABLE)",
        "BEST-LINKS",
        "LINK-GB/S",
        "CPU-GPU-NUMA",
        "MS/POD",
    )
    rows = [header]
    for s in result.strategies:
        rows.append(
            (
                s.strategy,
                str(s.placed),
                str(s.failed),
                str(s.admission_failures),
                f"{s.alloc_pct_at_first_failure:.1f}%",
                f"{s.alloc_pct_final:.1f}%",
                _pct(s.alignable_single_numa_share),
                _pct(s.best_bandwidth_share),
                "-" if s.mean_link_gbps is None else f"{s.mean_link_gbps:.1f}",
                _pct(s.cpu_gpu_colocated_share),
                f"{s.decision_ms_mean:.2f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    summary = (
        f"{result.nodes} nodes, {result.gpus} GPUs; {result.pods} pods arrived "
        f"({result.multi_gpu_pods} multi-GPU, {result.fractional_pods} fractional-GPU shared "
        f"on counts, {result.cpu_only_pods} CPU-only); seed {result.seed}"
    )
    return "\n".join([summary, *lines]) + "\n"


def write_plot(result: SimulationResult, path: Path) -> None:
    """Allocation ratio over arrived workload per strategy, and the alignment shares."""
    # Imported here: matplotlib is optional (the `plot` extra) and slow to import.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
        inset.plot(
            line.get_xdata(),
            line.get_ydata(),
            color=line.get_color(),
            linewidth=line.get_linewidth(),
        )
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


def save_figure(fig: Any, path: Path) -> None:
    """Write a simulate plot and free it; a path that cannot be written is InputError."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise InputError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def _run(args: argparse.Namespace) -> SimulationResult:
    strategies = _strategies(args.scorer)
    specs: Mapping[str, NumatopologySpec] | None = None
    topology_map = None
    if args.topology_dir is not None:
        nodes, specs = _read_topology_dir(args.topology_dir)
    else:
        nodes = parse_node_rows(_csv_rows(_open_text(args.nodes, DEFAULT_NODES)))
        try:
            raw_map: Any = json.loads(_open_text(args.topology_map, DEFAULT_MAP))
        except json.JSONDecodeError as exc:
            raise InputError(f"--topology-map: not JSON ({exc})") from None
        if not isinstance(raw_map, dict):
            raise InputError("--topology-map: expected a JSON object")
        topology_map = parse_topology_map(raw_map)
    if args.sample_nodes:
        nodes = sample_nodes(nodes, args.sample_nodes, seed=args.seed)
    pods = parse_pod_rows(_csv_rows(_open_text(args.trace, DEFAULT_TRACE)))
    workload = build_workload(
        pods,
        capacity_gpu_milli=sum(n.gpus for n in nodes) * GPU_MILLI,
        tune=args.tune,
        seed=args.seed,
        arrival=Arrival(args.arrival),
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


def _check_plot_target(path: Path) -> None:
    """Fail before a minute of replay, not after it, when the plot cannot be written."""
    if importlib.util.find_spec("matplotlib") is None:
        raise InputError("--plot needs matplotlib: pip install 'numatopo[plot]' (or drop --plot)")
    if not path.parent.is_dir():
        raise InputError(f"--plot: directory {path.parent} does not exist")


def run(args: argparse.Namespace) -> int:
    if args.multi_node:
        from numatopo_cli.commands import simulate_gangs  # it imports this module

        return simulate_gangs.run(args)
    try:
        if args.plot is not None:
            _check_plot_target(args.plot)
        result = _run(args)
        if args.plot is not None:
            write_plot(result, args.plot)
    except (InputError, TraceError, TopologyMapError) as exc:
        print(f"numatopo simulate: {exc}", file=sys.stderr)
        return 2
    mig = getattr(args, "mig_summary", None)
    if args.output == "json":
        document = result.to_dict()
        if mig is not None:
            document["migPool"] = mig
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        if mig is not None:
            sys.stdout.write(
                f"MIG pool: {mig['nodes']} nodes split into {mig['devices']} {mig['resource']} "
                f"devices (counted as GPUs below); {mig['pods']} fractional pods ask for one\n"
            )
        sys.stdout.write(render_table(result))
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _mig_pool(text: str) -> MigPool:
    try:
        return parse_mig_pool(text)
    except MigPoolError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a GPU-cluster trace and compare placement strategies",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--nodes", type=Path, help="node list CSV (sn,cpu_milli,memory_mib,gpu,model)"
    )
    parser.add_argument(
        "--trace", type=Path, help="pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli,...)"
    )
    parser.add_argument(
        "--topology-map", type=Path, help="JSON: GPU model and count -> node layout"
    )
    parser.add_argument(
        "--topology-dir", type=Path, help="directory of Numatopology JSON files, one per node"
    )
    parser.add_argument(
        "--scorer",
        action="append",
        metavar="NAME[,NAME]",
        help=f"strategies to compare (repeatable; default all): {', '.join(STRATEGIES)}",
    )
    parser.add_argument(
        "--policy",
        default=PolicyName.BEST_EFFORT.value,
        choices=[p.value for p in PolicyName],
        help="topology policy numatopo's engine applies to every pod (default best-effort)",
    )
    parser.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    parser.add_argument(
        "--tune",
        type=float,
        default=1.3,
        help="scale the workload to this multiple of the cluster's GPUs (default 1.3; 0: as is)",
    )
    parser.add_argument(
        "--arrival",
        default=Arrival.SHUFFLED.value,
        choices=[a.value for a in Arrival],
        help="arrival order",
    )
    parser.add_argument(
        "--sample-nodes", type=_positive, default=0, metavar="N", help="use N random nodes"
    )
    parser.add_argument(
        "--limit", type=_positive, default=0, metavar="N", help="replay only the first N pods"
    )
    parser.add_argument(
        "--mig-pool",
        type=_mig_pool,
        metavar="SHARE:PROFILE[:MODELS]",
        help="split SHARE of the nodes of MODELS (default G3, A100 NVSwitch) into MIG devices "
        "of PROFILE (1g.10gb .. 7g.80gb); fractional pods that fit one ask for one "
        "(numatopo_engine.simulation.mig_pool)",
    )
    parser.add_argument("-o", "--output", default="table", choices=["table", "json"])
    parser.add_argument(
        "--plot", type=Path, metavar="F.png", help="write the comparison figure (needs matplotlib)"
    )
    parser.add_argument(
        "--progress", action="store_true", help="progress bar on stderr even when not a TTY"
    )
    from numatopo_cli.commands import simulate_gangs

    simulate_gangs.add_arguments(parser)
    parser.set_defaults(func=run)
