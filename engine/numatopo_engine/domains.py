"""Network domains and all-or-nothing placement of pod groups across nodes (pure).

A `DomainTree` groups nodes by the labels of a NetworkTopology's levels, widest level
first. A node's domain at level k is the path of its label values at levels 0..k, so
the tree is always a tree even where two leaves under different spines reuse a value;
callers see a domain as its label value at that level. A node lacking a level's label
belongs to no domain of that level or of any narrower one (it is still a node of the
cluster, reachable only by groups that may spread anywhere).

`place_group` places every member of a group or none (raises UnsatisfiableError):
see its docstring.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from numatopo_engine.allocation import Engine, allocate
from numatopo_engine.annotations import Assignment
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.groups import GroupSpec, Strategy
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.packing import WorkloadMix
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState

__all__ = [
    "DomainTree",
    "GroupPlacement",
    "Member",
    "NodeCandidate",
    "place_group",
]

Path = tuple[str, ...]


class DomainTree:
    """Nodes grouped by level labels; `levels` widest first."""

    def __init__(self, levels: Sequence[str], paths: Mapping[str, Path]) -> None:
        self.levels = tuple(levels)
        self.paths = dict(paths)
        self.depth = {label: index for index, label in enumerate(self.levels)}
        # Per level: domain path -> its nodes, in node order (path, then name).
        self.members: list[dict[Path, list[str]]] = [{} for _ in self.levels]
        for node in sorted(self.paths, key=lambda n: (self.paths[n], n)):
            path = self.paths[node]
            for index in range(len(path)):
                self.members[index].setdefault(path[: index + 1], []).append(node)

    @classmethod
    def build(
        cls, levels: Sequence[str], node_labels: Mapping[str, Mapping[str, str]]
    ) -> DomainTree:
        if len(set(levels)) != len(levels):
            raise ValueError("levels must be unique")
        paths: dict[str, Path] = {}
        for node, labels in node_labels.items():
            path: list[str] = []
            for level in levels:
                value = labels.get(level)
                if value is None:
                    break
                path.append(value)
            paths[node] = tuple(path)
        return cls(levels, paths)

    @property
    def nodes(self) -> list[str]:
        """Every node, in tree order (nodes of one leaf next to each other)."""
        return sorted(self.paths, key=lambda n: (self.paths[n], n))

    def domain_of(self, node: str, level: str) -> str | None:
        """The node's domain (label value) at `level`, or None when it has none there."""
        index = self.depth.get(level)
        path = self.paths.get(node, ())
        if index is None or index >= len(path):
            return None
        return path[index]

    def domains(self, level: str) -> dict[Path, list[str]]:
        """The domains of `level` (by path) and their nodes, in tree order."""
        return self.members[self.depth[level]]

    def hops(self, a: str, b: str) -> int:
        """0 for the same node; else the levels climbed from the nodes to their lowest
        common domain: 1 for nodes in one domain of the narrowest level, len(levels)
        for nodes sharing only the widest, len(levels) + 1 for nodes sharing nothing."""
        if a == b:
            return 0
        pa, pb = self.paths.get(a, ()), self.paths.get(b, ())
        common = 0
        for x, y in zip(pa, pb, strict=False):
            if x != y:
                break
            common += 1
        return len(self.levels) + 1 - common


@dataclass(frozen=True)
class Member:
    key: str  # "namespace/name"
    rank: int | None
    request: PodRequest


@dataclass(frozen=True)
class NodeCandidate:
    topology: NumatopologySpec
    state: NodeState  # never mutated here


@dataclass(frozen=True)
class GroupPlacement:
    level: str | None  # the level of the shared domain (None: spread anywhere)
    domain: str | None  # its label value
    assignments: dict[str, Assignment]  # member key -> assignment (node inside)
    order: list[str]  # member keys by rank
    neighbour_hops: float  # mean hops between ranks i and i+1


def member_order(members: Sequence[Member]) -> list[Member]:
    """Ranked members by rank, then the unranked by key."""
    return sorted(members, key=lambda m: (m.rank is None, m.rank or 0, m.key))


def place_group(
    tree: DomainTree,
    members: Sequence[Member],
    nodes: Mapping[str, NodeCandidate],
    *,
    spec: GroupSpec,
    anchor: Mapping[str, str] | None = None,
    mix: WorkloadMix | None = None,
    engine: Engine | None = None,
) -> GroupPlacement:
    """Place every member inside one domain, or raise UnsatisfiableError.

    Levels tried: the narrowest first, up to the required level (or, with a preferred
    level or none, up to the widest and then anywhere). The first level with a domain
    that holds every member wins; among its domains, the one with the fewest free GPUs
    that still fits (best fit: whole empty domains stay free for big groups).
    """
    del mix  # used by the production version
    engine = engine or Engine()
    ordered = member_order(members)
    for level, domain, candidates in _candidates(tree, nodes, spec, anchor or {}):
        found = _fill(ordered, candidates, nodes, spec.strategy, engine)
        if found is not None:
            order = [m.key for m in ordered]
            where = [found[k].node for k in order]
            pairs = list(itertools.pairwise(where))
            hops = sum(tree.hops(a, b) for a, b in pairs) / len(pairs) if pairs else 0.0
            return GroupPlacement(level, domain, found, order, hops)
    raise UnsatisfiableError(f"group {spec.key}: {len(members)} members fit in no allowed domain")


def _candidates(
    tree: DomainTree,
    nodes: Mapping[str, NodeCandidate],
    spec: GroupSpec,
    anchor: Mapping[str, str],
) -> list[tuple[str | None, str | None, list[str]]]:
    top = 0
    if spec.required is not None:
        if spec.required not in tree.depth:
            raise UnsatisfiableError(f"level {spec.required!r} is not a level of the topology")
        top = tree.depth[spec.required]
    out: list[tuple[str | None, str | None, list[str]]] = []
    for index in range(len(tree.levels) - 1, top - 1, -1):
        level = tree.levels[index]
        found: list[tuple[int, Path, list[str]]] = []
        for path, inside in tree.domains(level).items():
            if not all(tree.domain_of(inside[0], lv) == v for lv, v in anchor.items()):
                continue
            usable = [n for n in inside if n in nodes]
            free = sum(nodes[n].state.free_gpu_count() for n in usable)
            found.append((free, path, usable))
        found.sort(key=lambda f: (f[0], f[1]))
        out.extend((level, path[-1], usable) for _, path, usable in found)
    if spec.required is None and not anchor:
        out.append(
            (
                None,
                None,
                [n for n in tree.nodes if n in nodes] + sorted(set(nodes) - set(tree.paths)),
            )
        )
    return out


def _fill(
    ordered: Sequence[Member],
    candidates: Sequence[str],
    nodes: Mapping[str, NodeCandidate],
    strategy: Strategy,
    engine: Engine,
) -> dict[str, Assignment] | None:
    states = {n: nodes[n].state.copy() for n in candidates}
    found: dict[str, Assignment] = {}
    pending = list(ordered)
    spread = strategy in (Strategy.DISTRIBUTED, Strategy.BALANCED)
    per_node = 1 if spread else len(ordered)
    while pending:
        progressed = False
        for node in candidates:
            taken = 0
            while pending and taken < per_node:
                member = pending[0]
                try:
                    decision = allocate(
                        nodes[node].topology, states[node], member.request, node, engine=engine
                    )
                except UnsatisfiableError:
                    break
                states[node].apply(member.key, decision.assignment)
                found[member.key] = decision.assignment
                pending.pop(0)
                taken += 1
                progressed = True
        if not progressed:
            return None
    return found
