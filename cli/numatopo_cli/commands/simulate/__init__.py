"""`numatopo simulate`: replay a GPU-cluster trace under several placement strategies.

Defaults replay the Alibaba PAI GPU trace 2023 (`openb_pod_list_default.csv` on the
1,213-node `openb_node_list_gpu_node.csv`, shipped with numatopo) the way the FGD
simulator does (workload scaled to 1.3x the cluster's GPUs, shuffled arrival, seed
42), with every strategy. `-o json` keys: docs/operations.md ("-o json"); their
meanings: `numatopo_engine.simulation.metrics`. `--multi-node` replays multi-node jobs
on a leaf/spine cluster instead (`gangs`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from numatopo_cli.commands.simulate import gangs, replay
from numatopo_cli.commands.simulate.files import whole_number
from numatopo_engine.annotations import PolicyName
from numatopo_engine.simulation.mig_pool import MigPool, MigPoolError, parse_mig_pool
from numatopo_engine.simulation.strategies import STRATEGIES
from numatopo_engine.simulation.trace import Arrival

__all__ = ["HELP", "add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    return gangs.run(args) if args.multi_node else replay.run(args)


def _mig_pool(text: str) -> MigPool:
    try:
        return parse_mig_pool(text)
    except MigPoolError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


HELP = "replay a GPU-cluster trace and compare placement strategies"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--nodes", type=Path, help="node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
    add("--trace", type=Path, help="pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli,...)")
    add("--topology-map", type=Path, help="JSON: GPU model and count -> node layout")
    add("--topology-dir", type=Path, help="directory of Numatopology JSON files, one per node")
    add(
        "--scorer",
        action="append",
        metavar="NAME[,NAME]",
        help=f"strategies to compare (repeatable; default all): {', '.join(STRATEGIES)}",
    )
    add(
        "--policy",
        default=PolicyName.BEST_EFFORT.value,
        choices=[p.value for p in PolicyName],
        help="topology policy numatopo's engine applies to every pod (default best-effort)",
    )
    add("--seed", type=int, default=42, help="random seed (default 42)")
    add(
        "--tune",
        type=float,
        default=1.3,
        help="scale the workload to this multiple of the cluster's GPUs (default 1.3; 0: as is)",
    )
    arrivals = [a.value for a in Arrival]
    add("--arrival", default=Arrival.SHUFFLED.value, choices=arrivals, help="arrival order")
    add("--sample-nodes", type=whole_number, default=0, metavar="N", help="use N random nodes")
    add("--limit", type=whole_number, default=0, metavar="N", help="replay only the first N pods")
    add(
        "--mig-pool",
        type=_mig_pool,
        metavar="SHARE:PROFILE[:MODELS]",
        help="split SHARE of the nodes of MODELS (default G3, A100 NVSwitch) into MIG devices "
        "of PROFILE (1g.10gb .. 7g.80gb); fractional pods that fit one ask for one "
        "(numatopo_engine.simulation.mig_pool)",
    )
    add("-o", "--output", default="table", choices=["table", "json"])
    add("--plot", type=Path, metavar="F.png", help="write the comparison figure (needs matplotlib)")
    add("--progress", action="store_true", help="progress bar on stderr even when not a TTY")
    gangs.add_arguments(parser)
