"""Leaf/spine clusters of real node shapes for the group placement tests."""

from __future__ import annotations

import json
from pathlib import Path

from numatopo_engine.allocation import Engine, allocate
from numatopo_engine.annotations import PolicyName
from numatopo_engine.domains import DomainTree, Member, NodeCandidate
from numatopo_engine.groups import GroupSpec, Strategy
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.state import NodeState

TOPOLOGIES = Path(__file__).resolve().parents[2] / "fixtures" / "topologies"
SPINE = "example.com/spine"
LEAF = "example.com/leaf"
LEVELS = (SPINE, LEAF)
_ENGINE = Engine()


def shape(name: str = "h100-nvswitch") -> NumatopologySpec:
    return Numatopology.model_validate(json.loads((TOPOLOGIES / f"{name}.json").read_text())).spec


def leaf_spine(
    spines: int, leaves: int, per_leaf: int, *, topology: NumatopologySpec | None = None
) -> tuple[DomainTree, dict[str, NodeCandidate]]:
    """`spines` x `leaves` x `per_leaf` nodes named n-S-L-I, all of one shape."""
    topology = topology or shape()
    labels: dict[str, dict[str, str]] = {}
    nodes: dict[str, NodeCandidate] = {}
    for s in range(spines):
        for leaf in range(leaves):
            for i in range(per_leaf):
                name = f"n-{s}-{leaf}-{i:02d}"
                labels[name] = {SPINE: f"s{s}", LEAF: f"s{s}-l{leaf}"}
                nodes[name] = NodeCandidate(topology, NodeState(topology))
    return DomainTree.build(LEVELS, labels), nodes


def members(count: int, gpus: int = 8, cpus: int = 8, *, name: str = "w") -> list[Member]:
    options = TopologyOptions(policy=PolicyName.BEST_EFFORT)
    out = []
    for rank in range(count):
        container = ContainerRequest(name="c", cpu_milli=cpus * 1000, gpus=gpus)
        request = PodRequest("ml", f"{name}-{rank}", (container,), options=options)
        out.append(Member(request.key, rank, request))
    return out


def group(
    size: int,
    *,
    required: str | None = None,
    preferred: str | None = None,
    strategy: Strategy = Strategy.CONSOLIDATED,
    name: str = "g",
) -> GroupSpec:
    return GroupSpec("ml", name, size, required, preferred, strategy, None)


def occupy(nodes: dict[str, NodeCandidate], node: str, gpus: int, *, key: str = "") -> None:
    """Book `gpus` GPUs (and one CPU each) of `node` for another pod, in place."""
    candidate = nodes[node]
    request = members(1, gpus, gpus, name=key or f"busy-{node}-{len(candidate.state.assignments)}")[
        0
    ]
    decision = allocate(candidate.topology, candidate.state, request.request, node, engine=_ENGINE)
    candidate.state.apply(request.key, decision.assignment)
