"""`numatopo domains`: the network domains of a cluster, their nodes and free GPUs.

Input: a cluster file (`--cluster F.json`: node shapes, node labels, what each node's
pods hold; format in `numatopo_engine.simulation.leafspine`, and `numatopo simulate
--multi-node --write-cluster F.json` writes one), or `--generate BxSxLxN` for an empty
leaf/spine cluster of the Alibaba node list's 8-GPU shapes. Levels come from a
NetworkTopology object (`--network-topology F.yaml`) or `--levels a,b,c` (widest
first); a generated cluster defaults to its own three levels.

`--place N` asks numatopo's engine where a group of N pods (`--gpus` and `--cpus`
each) would go, under `--required`/`--preferred` LEVEL and `--strategy`, and marks its
ranks on the nodes. `--svg F` draws the tree. `-o json` is
`numatopo_cli.reports.domains.DomainsReport` (docs/operations.md, "-o json").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from numatopo_cli.commands.simulate.files import InputError, node_shapes, whole_number
from numatopo_cli.progress import progress_bar
from numatopo_cli.render import domains as view
from numatopo_cli.reports.domains import DomainsReport, GroupPlacementRow
from numatopo_engine.annotations import PolicyName
from numatopo_engine.domains import (
    DomainTree,
    GroupPlacement,
    Member,
    NodeCandidate,
    describe_domain,
    domain_fragmentation,
    place_group,
)
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.groups import GroupSpec, Strategy
from numatopo_engine.kube_names import is_qualified_name
from numatopo_engine.network_topology import NetworkTopology
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.simulation.leafspine import LEVELS, ClusterFile, LeafSpine, generate

PROG = "numatopo domains"


def _first(exc: ValidationError) -> str:
    """The first validation error: where, and what is wrong."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


def _levels(args: argparse.Namespace) -> list[str]:
    if args.network_topology is not None:
        try:
            raw: Any = yaml.safe_load(args.network_topology.read_text(encoding="utf-8"))
            return NetworkTopology.model_validate(raw).spec.labels
        except OSError as exc:
            raise InputError(f"--network-topology: {exc.strerror or exc}") from None
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise InputError(f"--network-topology: not YAML ({exc})") from None
        except ValidationError as exc:
            raise InputError(f"--network-topology: not a NetworkTopology ({_first(exc)})") from None
    if args.levels:
        levels = [part.strip() for part in args.levels.split(",") if part.strip()]
        bad = [level for level in levels if not is_qualified_name(level)]
        if bad or not levels or len(set(levels)) != len(levels):
            raise InputError(f"--levels {args.levels!r}: unique node label keys, widest first")
        return levels
    if args.generate:
        return list(LEVELS)
    raise InputError("give --network-topology F.yaml or --levels a,b,c (widest first)")


def _cluster(args: argparse.Namespace) -> ClusterFile:
    path = args.cluster
    if path is not None:
        try:
            raw: Any = json.loads(path.read_text(encoding="utf-8"))
            return ClusterFile.model_validate(raw)
        except OSError as exc:
            raise InputError(f"--cluster {path}: {exc.strerror or exc}") from None
        except ValidationError as exc:
            raise InputError(f"--cluster {path}: not a cluster file ({_first(exc)})") from None
        except ValueError as exc:
            raise InputError(f"--cluster {path}: not JSON ({exc})") from None
    if args.generate:
        try:
            layout = LeafSpine.parse(args.generate)
        except ValueError as exc:
            raise InputError(f"--generate: {exc}") from None
        return generate(layout, node_shapes(), seed=args.seed)
    raise InputError("give --cluster F.json or --generate BLOCKSxSPINESxLEAVESxNODES")


def _place(
    args: argparse.Namespace,
    cluster: ClusterFile,
    levels: list[str],
    candidates: dict[str, NodeCandidate],
) -> GroupPlacement:
    for flag, level in (("--required", args.required), ("--preferred", args.preferred)):
        if level is not None and level not in levels:
            raise InputError(f"{flag} {level!r} is not one of the levels: {', '.join(levels)}")
    options = TopologyOptions(policy=PolicyName(args.policy))
    container = ContainerRequest(name="main", cpu_milli=args.cpus * 1000, gpus=args.gpus)
    members = []
    for rank in range(args.place):
        request = PodRequest("default", f"worker-{rank}", (container,), options=options)
        members.append(Member(request.key, rank, request))
    spec = GroupSpec(
        "default", "what-if", args.place, args.required, args.preferred,
        Strategy(args.strategy), None,
    )  # fmt: skip
    return place_group(cluster.tree(levels), members, candidates, spec=spec)


def _report(
    tree: DomainTree,
    candidates: dict[str, NodeCandidate],
    nodes: bool,
    placement: GroupPlacement | None,
) -> DomainsReport:
    placed = None
    if placement is not None:
        placed = GroupPlacementRow(
            domain=describe_domain(placement.level, placement.path),
            members=len(placement.order),
            nodes=len({a.node for a in placement.assignments.values()}),
            neighbour_hops=round(placement.neighbour_hops, 4),
        )
    return DomainsReport(
        levels=list(tree.levels),
        domains=view.domain_rows(tree, candidates, nodes=nodes, placement=placement),
        fragmentation={
            level: round(value, 4)
            for level, value in domain_fragmentation(tree, candidates).items()
        },
        placement=placed,
    )


def run(args: argparse.Namespace) -> int:
    try:
        levels = _levels(args)
        cluster = _cluster(args)
        try:
            # A generated cluster's nodes get their own names, as a real cluster's have.
            named = args.cluster is None
            candidates = cluster.candidates(progress_bar("nodes read"), named=named)
        except ValueError as exc:
            raise InputError(f"--cluster: {exc}") from None
        tree = cluster.tree(levels)
        placement = _place(args, cluster, levels, candidates) if args.place else None
        if args.svg is not None:
            try:
                args.svg.write_text(
                    view.render_svg(tree, candidates, placement=placement), encoding="utf-8"
                )
            except OSError as exc:
                raise InputError(f"--svg {args.svg}: {exc.strerror or exc}") from None
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except UnsatisfiableError as exc:
        print(f"{PROG}: the group does not fit: {exc.reason}", file=sys.stderr)
        return 1
    if args.output == "json":
        sys.stdout.write(_report(tree, candidates, args.nodes, placement).to_json())
    else:
        sys.stdout.write(view.render_table(tree, candidates, nodes=args.nodes, placement=placement))
    return 0


HELP = "show network domains (leaf/spine, NVLink cliques) with nodes and free GPUs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--cluster", type=Path, metavar="F.json", help="cluster file")
    add("--generate", metavar="BxSxLxN", help="an empty leaf/spine cluster instead (e.g. 1x2x4x4)")
    add("--seed", type=int, default=42, help="seed of --generate (default 42)")
    add("--network-topology", type=Path, metavar="F.yaml", help="NetworkTopology object")
    add("--levels", metavar="A,B,C", help="level label keys, widest first")
    add("--nodes", action="store_true", help="list every node too")
    add("--place", type=whole_number, default=0, metavar="N", help="place N pods")
    add("--gpus", type=whole_number, default=8, help="GPUs per pod (default 8)")
    add("--cpus", type=whole_number, default=8, help="CPUs per pod (default 8)")
    add("--required", metavar="LEVEL", help="level the group must share")
    add("--preferred", metavar="LEVEL", help="level the group should share")
    add("--strategy", default=Strategy.CONSOLIDATED.value, choices=[s.value for s in Strategy])
    add(
        "--policy",
        default=PolicyName.BEST_EFFORT.value,
        choices=[p.value for p in PolicyName],
        help="topology policy of the pods (default best-effort)",
    )
    add("-o", "--output", default="table", choices=["table", "json"])
    add("--svg", type=Path, metavar="F.svg", help="also draw the tree as SVG")
