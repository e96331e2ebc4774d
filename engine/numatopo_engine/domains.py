"""Network domains, their fragmentation, and all-or-nothing placement of pod groups: the tree
(paths, `NODE_LEVEL`, hops), frag(level) and the growth (2·a·F_d - a²) / G_d that ranks domains are
docs/DESIGN.md's "The domain tree" and "Placement".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import groupby, islice, pairwise
from typing import Literal

import numpy as np

from numatopo_engine.allocation import Engine, allocate, group_by_shape, score_many
from numatopo_engine.annotations import Assignment, CpuMode
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.fewest_domains import Cost, fewest
from numatopo_engine.groups import GroupSpec, Strategy
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.network_topology import HOSTNAME_LABEL
from numatopo_engine.packing import WorkloadMix
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState

Path = tuple[str, ...]
ANYWHERE: Path = ()
# The node as the narrowest level: a real last level of the tree, or implicit below it.
NODE_LEVEL = HOSTNAME_LABEL


class DomainTree:
    """Nodes grouped by level labels; `levels` widest first."""

    def __init__(self, levels: Sequence[str], paths: Mapping[str, Path]) -> None:
        self.levels = tuple(levels)
        self.paths = dict(paths)
        self.depth = {label: index for index, label in enumerate(self.levels)}
        # Without a hostname level each node is its own domain one level below the narrowest.
        self.implicit_nodes = not self.levels or self.levels[-1] != HOSTNAME_LABEL
        self.order = sorted(self.paths, key=lambda n: (self.paths[n], n))
        self.position = {node: index for index, node in enumerate(self.order)}
        # Per level: domain path -> its nodes, in tree order.
        self.members: list[dict[Path, list[str]]] = [{} for _ in self.levels]
        # Per domain (the root `()` included): its child domains and the nodes whose path ends at it
        # (no label of the next level), both in tree order.
        self.children: dict[Path, list[Path]] = {ANYWHERE: []}
        self.direct: dict[Path, list[str]] = {ANYWHERE: []}
        for node in self.order:
            path = self.paths[node]
            for index in range(len(path)):
                domain = path[: index + 1]
                inside = self.members[index].setdefault(domain, [])
                if not inside:
                    self.children[domain[:-1]].append(domain)
                    self.children[domain] = []
                    self.direct[domain] = []
                inside.append(node)
            self.direct[path].append(node)

    @classmethod
    def build(
        cls, levels: Sequence[str], node_labels: Mapping[str, Mapping[str, str]]
    ) -> DomainTree:
        """The tree of `node_labels` (node -> its labels) under `levels`, widest first."""
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

    def node_path(self, node: str) -> Path:
        """The node's path, then its name unless the tree's last level is the hostname."""
        path = self.paths.get(node, ())
        if self.implicit_nodes or len(path) < len(self.levels):
            return (*path, node)
        return path

    def spanned(self, level: str, nodes: Iterable[str]) -> int | None:
        """How many domains of `level` hold `nodes` (a node without its label counts as one); None
        for a label that is no level here."""
        if level not in self.depth:
            return len(set(nodes)) if level == NODE_LEVEL else None
        index = self.depth[level]
        return len({
            self.paths[n][: index + 1] if len(self.paths.get(n, ())) > index else ("", n)
            for n in nodes
        })  # fmt: skip

    def hops(self, a: str, b: str) -> int:
        """Hops between two nodes (docs/DESIGN.md, "The domain tree")."""
        if a == b:
            return 0
        common = 0
        for x, y in zip(self.paths.get(a, ()), self.paths.get(b, ()), strict=False):
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
class Anchor:
    """One domain a group must stay inside: `level` (or `NODE_LEVEL`) and its full `path` (leaves
    under two spines may share a value; `DomainTree.node_path` for one node)."""

    level: str
    path: Path


@dataclass(frozen=True)
class GroupPlacement:
    level: str | None  # the level of the shared domain (NODE_LEVEL: one node; None: anywhere)
    domain: str | None  # its label value (the node's name at the node level)
    assignments: dict[str, Assignment]  # member key -> assignment (node inside)
    order: list[str]  # member keys by rank
    neighbour_hops: float  # mean hops between ranks i and i+1 (0 for one member)
    path: Path = ANYWHERE  # the shared domain's full path, widest value first


def describe_domain(level: str | None, path: Path) -> str:
    """`level=value`, with the wider values (`…=l0 under s1`): a value may recur under parents."""
    if level is None or not path:
        return "anywhere"
    text = f"{level}={path[-1]}"
    return text + (f" under {'/'.join(path[:-1])}" if len(path) > 1 else "")


# -- metrics ------------------------------------------------------------------------


def _gpu_totals(
    tree: DomainTree, nodes: Mapping[str, NodeCandidate]
) -> dict[tuple[int, Path], tuple[int, int]]:
    """(level index, domain path) -> (free GPUs, GPUs) over the domain's known nodes."""
    totals: dict[tuple[int, Path], tuple[int, int]] = {}
    for node, path in tree.paths.items():
        candidate = nodes.get(node)
        if candidate is None:
            continue
        free, size = candidate.state.free_gpu_count(), len(candidate.topology.gpus)
        for index in range(len(path)):
            key = (index, path[: index + 1])
            held = totals.get(key, (0, 0))
            totals[key] = (held[0] + free, held[1] + size)
    return totals


def domain_utilization(
    tree: DomainTree, nodes: Mapping[str, NodeCandidate]
) -> dict[tuple[str, str], float]:
    """(level, domain value) -> the share of its GPUs in use (domains without GPUs left out; domains
    of one level sharing a value under different parents are summed)."""
    merged: dict[tuple[str, str], tuple[int, int]] = {}
    for (index, path), (free, size) in _gpu_totals(tree, nodes).items():
        key = (tree.levels[index], path[-1])
        held = merged.get(key, (0, 0))
        merged[key] = (held[0] + free, held[1] + size)
    return {key: 1.0 - free / size for key, (free, size) in merged.items() if size}


def domain_fragmentation(tree: DomainTree, nodes: Mapping[str, NodeCandidate]) -> dict[str, float]:
    """Per level, its domain fragmentation; 0.0 with no free GPU."""
    weighted = dict.fromkeys(tree.levels, 0.0)
    free_of = dict.fromkeys(tree.levels, 0)
    for (index, _), (free, size) in _gpu_totals(tree, nodes).items():
        if size:
            level = tree.levels[index]
            weighted[level] += free * (1.0 - free / size)
            free_of[level] += free
    return {
        level: weighted[level] / free_of[level] if free_of[level] else 0.0 for level in weighted
    }


# -- placement ------------------------------------------------------------------------


def place_group(
    tree: DomainTree,
    members: Sequence[Member],
    nodes: Mapping[str, NodeCandidate],
    *,
    spec: GroupSpec,
    anchor: Anchor | None = None,
    mix: WorkloadMix | None = None,
    engine: Engine | None = None,
) -> GroupPlacement:
    """Place every member inside one domain (docs/DESIGN.md, "Placement"), on copies of the nodes'
    states, or raise UnsatisfiableError. `anchor` keeps the group inside that domain (a lost member
    goes back where its group runs; members may then be fewer than `spec.size`)."""
    if not members:
        raise ValueError("place_group: no members")
    if len({m.key for m in members}) != len(members):
        raise ValueError("place_group: member keys must be unique")
    # Ranked members by rank, then the unranked by key.
    ordered = sorted(members, key=lambda m: (m.rank is None, m.rank or 0, m.key))
    return _Placer(tree, ordered, nodes, spec, anchor, mix, engine or Engine()).run()


# How nodes are chosen inside a domain: the strategies, and distributed's fallback "spread" (every
# node of the domain, members as even as the nodes allow).
_Mode = Strategy | Literal["spread"]


@dataclass
class _Placer:
    tree: DomainTree
    ordered: list[Member]
    nodes: Mapping[str, NodeCandidate]
    spec: GroupSpec
    anchor: Anchor | None
    mix: WorkloadMix | None
    engine: Engine

    def __post_init__(self) -> None:
        ordered, tree, spec = self.ordered, self.tree, self.spec
        self.need = len(ordered)
        self.largest = max(ordered, key=lambda m: _size_key(m.request)).request
        self.uniform = len({_request_key(m.request) for m in ordered}) == 1
        # The implicit node level's index, when the tree has no hostname level.
        self.node_index = len(tree.levels) if tree.implicit_nodes else None
        self.prefer = self._level_index(spec.preferred)
        self.most_per = self._level_count(spec.most_per_domain, "max members per domain")
        self.slices = self._level_count(spec.slice, "slice")
        self.bound: dict[str, int] = {}  # nodes that hold a member: at most how many
        self.copies: dict[str, int] = {}  # exact counts, filled per domain looked at
        self.memo: dict[object, int] = {}
        self.rank: dict[str, float] = {}
        self.refusals: dict[str, int] = {}
        self.tried: list[str] = []

    # -- the search ----------------------------------------------------------------

    def run(self) -> GroupPlacement:
        levels, anywhere = self._levels()
        self._count()
        passes: list[_Mode] = [self.spec.strategy]
        if self.spec.strategy is Strategy.DISTRIBUTED:
            passes.append("spread")  # no domain has a node per member
        for strategy in passes:
            self.tried = []
            for index in levels:
                if strategy == "spread" and index == self.node_index:
                    continue  # spreading over one node is no spread
                found = self._at_level(index, strategy)
                if found is not None:
                    return found
            if anywhere:
                found = self._try(strategy)
                if found is not None:
                    return found
        if not self.uniform and self.slices is None:  # in turn would ignore slices
            found = self._member_by_member(levels, anywhere)
            if found is not None:
                return found
        raise UnsatisfiableError(self._why(levels, anywhere))

    def _level_count(self, given: tuple[str, int] | None, what: str) -> tuple[int, int] | None:
        if given is None:
            return None
        index = self._level_index(given[0])
        if index is None:
            raise self._no_level(f"{given[0]!r} ({what})")
        return index, given[1]

    def _no_level(self, what: str) -> UnsatisfiableError:
        return UnsatisfiableError(
            f"group {self.spec.key}: {what} is not a level of the network topology "
            f"(levels: {', '.join(self.tree.levels) or 'none'})"
        )

    def _level_index(self, label: str | None) -> int | None:
        """The index of a level label; the hostname is the node level, real or not."""
        if label is None:
            return None
        if label in self.tree.depth:
            return self.tree.depth[label]
        return self.node_index if label == NODE_LEVEL else None

    def _anchor_index(self) -> int | None:
        anchor, tree = self.anchor, self.tree
        if anchor is None:
            return None
        if anchor.level == NODE_LEVEL and self.node_index is not None:
            index = self.node_index
            valid = bool(anchor.path) and len(anchor.path) <= index + 1
        elif anchor.level in tree.depth:
            index = tree.depth[anchor.level]
            valid = len(anchor.path) == index + 1
        else:
            raise self._no_level(repr(anchor.level))
        if not valid:
            raise ValueError(f"place_group: {anchor} is no domain path of its level")
        return index

    def _levels(self) -> tuple[list[int], bool]:
        """Level indices to try, narrowest first, and whether anywhere is allowed."""
        tree, spec = self.tree, self.spec
        top = 0
        if spec.required is not None:
            if spec.required not in tree.depth:
                raise self._no_level(repr(spec.required))
            top = tree.depth[spec.required]
        pinned = self._anchor_index()
        if pinned is not None:
            top = max(top, pinned)
        narrowest = len(tree.levels) - 1 if self.node_index is None else self.node_index
        if self.most_per is not None and self.need > self.most_per[1]:
            # One domain of the capped level, or of a narrower one, holds too few.
            narrowest = min(narrowest, self.most_per[0] - 1)
        anywhere = spec.required is None and self.anchor is None
        return list(range(narrowest, top - 1, -1)), anywhere

    def _count(self) -> None:
        """Which nodes hold a member (`score_many`), and at most how many from free counts (exact
        counts: `_copies`, per domain looked at)."""
        engine, request = self.engine, self.largest
        names = list(self.nodes)
        shapes = group_by_shape((self.nodes[n].topology, self.nodes[n].state) for n in names)
        amounts = _amounts(request)
        for shape in shapes:
            scored = score_many(
                shape.topology, shape.states, request, checked=False, engine=engine, mix=self.mix
            )
            for indices, summary in scored.refused:
                self.refusals[summary] = self.refusals.get(summary, 0) + len(indices)
            for index in np.flatnonzero(scored.scores >= 0).tolist():
                node = names[shape.positions[index]]
                state = shape.states[index]
                left = (state.free_gpu_count(), state.free_cpu_count(), state.free_memory_total())
                fits = [free // asked for free, asked in zip(left, amounts, strict=True) if asked]
                self.bound[node] = max(1, min([self.need, *fits]))
                self.rank[node] = float(scored.rank[index])

    def _copies(self, node: str) -> int:
        """Members the node holds, on a copy of its state (once per free shape)."""
        found = self.copies.get(node)
        if found is not None:
            return found
        state = self.nodes[node].state
        key = (
            state.shape_key,
            state.free_signature(),
            tuple(sorted(state.memory_groups().items())),
        )
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._copies_on(node, self.largest, self.bound[node])
        self.copies[node] = found
        return found

    def _copies_on(self, node: str, request: PodRequest, most: int) -> int:
        candidate = self.nodes[node]
        state = candidate.state.copy()
        for count in range(most):
            try:
                decision = allocate(candidate.topology, state, request, node, engine=self.engine)
            except UnsatisfiableError:
                return count
            state.apply(f"{request.key}#{count}", decision.assignment)
        return most

    def _at_level(self, index: int, strategy: _Mode) -> GroupPlacement | None:
        """The best domain of level `index` that holds the group, placed, or None; ranked by growth
        first (no node counts needed), so usually one fitting domain is counted exactly."""
        ranked: list[tuple[float, int, Path, list[str]]] = []
        short: list[tuple[int, Path, list[str]]] = []  # upper bound already short
        for order, (path, inside) in enumerate(self._domains(index)):
            bound = sum(self.bound[n] for n in inside)
            if bound < self.need:
                short.append((bound, path, inside))
                continue
            ranked.append((self._growth(index, path), order, path, inside))
        ranked.sort(key=lambda r: r[:2])
        best = (0, "")
        if self.prefer is not None and index < self.prefer and len(ranked) > 1:
            # Wider than the preferred level: fewest of its domains first, then the usual ranking.
            steered, preferred = [], self.spec.preferred or NODE_LEVEL
            for growth, order, path, inside in ranked:
                chosen = self._select(index, path, inside, strategy)
                if chosen is None:
                    best = max(best, (sum(self._copies(n) for n in inside), path[-1]))
                    continue
                spread = self.tree.spanned(preferred, (n for n, _ in chosen)) or 0
                steered.append((spread, growth, self._broken(chosen), order))
            steered.sort()
            ranked = [r for key in steered for r in ranked if r[1] == key[3]]
        for _, alike in groupby(ranked, key=lambda r: r[0]):  # runs of equal growth
            fitting: list[tuple[int, int, Path, list[tuple[str, int]]]] = []
            for _, order, path, inside in alike:
                chosen = self._select(index, path, inside, strategy)
                if chosen is None:
                    best = max(best, (sum(self._copies(n) for n in inside), path[-1]))
                    continue
                fitting.append((self._broken(chosen), order, path, chosen))
            fitting.sort(key=lambda f: f[:2])
            for _, _, path, chosen in fitting:
                found = self._realise(index, path, chosen)
                if found is not None:
                    return found
        if short:
            bound, path, inside = max(short, key=lambda s: s[0])
            if bound > best[0]:
                best = max(best, (sum(self._copies(n) for n in inside), path[-1]))
        tried = len(ranked) + len(short)
        what = (
            f"{tried} node{'' if tried == 1 else 's'}"
            if index == self.node_index
            else f"{tried} domain{'' if tried == 1 else 's'} of {self.tree.levels[index]}"
        )
        self.tried.append(
            what + (f" (the best, {best[1]}, holds {best[0]} of {self.need})" if best[1] else "")
        )
        return None

    def _try(self, strategy: _Mode) -> GroupPlacement | None:
        inside = self._anywhere()
        chosen = self._select(None, ANYWHERE, inside, strategy)
        if chosen is None:
            held = sum(self._copies(n) for n in inside)
            self.tried.append(f"anywhere (the cluster holds {held} of {self.need})")
            return None
        return self._realise(None, ANYWHERE, chosen)

    def _anywhere(self, every: bool = False) -> list[str]:
        """Every candidate node (holding a member, unless `every`), tree order, unlabelled last."""
        keep = self.nodes if every else self.bound
        unlabelled = sorted(n for n in keep if n not in self.tree.paths)
        return [n for n in self.tree.order if n in keep] + unlabelled

    def _domains(self, index: int, every: bool = False) -> list[tuple[Path, list[str]]]:
        """The domains of level `index` inside the anchor with their candidate nodes, tree order."""
        tree, anchor = self.tree, self.anchor
        keep = self.nodes if every else self.bound
        if index == self.node_index:
            required = tree.depth.get(self.spec.required or "", -1)
            out: list[tuple[Path, list[str]]] = []
            # A node must lie in a domain of the required level, and of the slice level.
            inside = max(required, self.slices[0] if self.slices else -1, -1)
            if inside == self.node_index:
                inside = -1
            for node in self._anywhere(every) if anchor is None else tree.order:
                if node not in keep or len(tree.paths.get(node, ())) <= inside:
                    continue
                path = tree.node_path(node)
                if anchor is None or (
                    path == anchor.path
                    if anchor.level == NODE_LEVEL
                    else path[: len(anchor.path)] == anchor.path
                ):
                    out.append((path, [node]))
            return out
        return [
            (path, [n for n in inside if n in keep])
            for path, inside in tree.members[index].items()
            if anchor is None or path[: len(anchor.path)] == anchor.path
        ]

    # -- choosing nodes inside a domain -----------------------------------------------

    def _select(
        self, index: int | None, path: Path, inside: Sequence[str], mode: _Mode
    ) -> list[tuple[str, int]] | None:
        """The nodes (tree order) and members per node inside domain `path`, or None."""
        need = self.need
        copies = {n: self._copies(n) for n in inside}
        if sum(copies.values()) < need:
            return None
        if mode is Strategy.CONSOLIDATED:
            return self._pick(index, path, copies)[1] or None
        if mode is Strategy.DISTRIBUTED:
            if len(copies) < need:
                return None
            return self._pick(index, path, dict.fromkeys(copies, 1))[1] or None
        if mode == "spread":
            cap = next(
                q
                for q in range(-(-need // len(copies)), need + 1)
                if sum(min(c, q) for c in copies.values()) >= need
            )
            units = {n: min(c, cap) for n, c in copies.items() if c}
            if self.most_per or self.slices:  # caps and slices decide who takes what
                return self._pick(index, path, units)[1] or None
            return _even(list(units), units, need)
        assert mode is Strategy.BALANCED
        # Consolidated's counts with the lowest cap per node keeping them, then members evened out.
        cost, picked = self._pick(index, path, copies)
        if not picked:
            return None
        counts = cost[: len(self.tree.levels) + 2]
        low, high = -(-need // len(picked)), max(copies.values())
        while low < high:
            middle = (low + high) // 2
            trial = self._pick(index, path, {n: min(c, middle) for n, c in copies.items()})
            if trial[1] and trial[0][: len(counts)] == counts:
                high = middle
            else:
                low = middle + 1
        units = {n: min(c, low) for n, c in copies.items()}
        _, picked = self._pick(index, path, units)
        if self.slices is not None:
            return picked  # evening out would move members across slice domains
        return _even([n for n, _ in picked], units, need)

    def _pick(
        self, index: int | None, path: Path, units: Mapping[str, int]
    ) -> tuple[Cost, list[tuple[str, int]]]:
        """`fewest_domains.fewest` inside domain `path`; ((), []) when the units fall short."""
        need = self.need
        if index is not None and index == self.node_index:
            node = path[-1]
            return ((), [(node, need)]) if units.get(node, 0) >= need else ((), [])
        loose = sorted(n for n in units if n not in self.tree.paths) if path == ANYWHERE else []
        found = fewest(
            self.tree, path, units, need, loose=loose, tie=self._tie,
            growth=self._part_growth, first=self.prefer, most_per=self.most_per,
            slices=self.slices,
        )  # fmt: skip
        if found is None:
            return (), []
        cost, picked = found
        position = self.tree.position
        picked.sort(key=lambda p: (position.get(p[0], len(position)), p[0]))
        return cost, picked

    def _part_growth(self, part: str | Path, members: int) -> float:
        """DESIGN's growth (2aF - a²)/G for `members` taken from a node or domain."""
        if isinstance(part, str):
            candidate = self.nodes[part]
            free, size = candidate.state.free_gpu_count(), len(candidate.topology.gpus)
        else:
            free, size = self._totals.get((len(part) - 1, part), (0, 0))
        taken = members * _gpus_of(self.largest)
        return (2 * taken * free - taken * taken) / size if size else 0.0

    def _tie(self, node: str) -> tuple[float, float]:
        return float(self._is_free(node)), -self.rank.get(node, 0.0)

    def _is_free(self, node: str) -> bool:
        candidate = self.nodes[node]
        state = candidate.state
        return state.free_gpu_count() == len(candidate.topology.gpus) and not state.assignments

    # -- ranking domains ------------------------------------------------------------

    @cached_property
    def _totals(self) -> dict[tuple[int, Path], tuple[int, int]]:
        return _gpu_totals(self.tree, self.nodes)

    def _growth(self, index: int, path: Path) -> float:
        """`_part_growth` of the group summed over `path`'s level and every wider one (one node's
        own term first at the node level)."""
        parts: list[str | Path] = []
        depth = index + 1
        if index == self.node_index:
            parts.append(path[-1])
            depth = len(path) - 1
        parts += [path[: level + 1] for level in range(depth)][::-1]
        return sum(self._part_growth(part, self.need) for part in parts)

    def _broken(self, chosen: Sequence[tuple[str, int]]) -> int:
        """Wholly free nodes the choice would take from."""
        return sum(1 for node, _ in chosen if self._is_free(node))

    # -- allocating -------------------------------------------------------------------

    def _realise(
        self, index: int | None, path: Path, chosen: Sequence[tuple[str, int]]
    ) -> GroupPlacement | None:
        """Allocate the members on the chosen (node, members) in domain `path` of level `index`
        (None: anywhere); None when one does not fit."""
        found: dict[str, Assignment] = {}
        members = iter(self.ordered)
        for node, count in chosen:
            placed = first_fit(self.nodes, [node], list(islice(members, count)), self.engine)
            if placed is None:
                return None
            found.update(placed)
        return self._placement(index, path, found)

    def _placement(
        self, index: int | None, path: Path, found: dict[str, Assignment]
    ) -> GroupPlacement:
        order = [m.key for m in self.ordered]
        where = [found[k].node for k in order]
        pairs = list(pairwise(where))
        hops = sum(self.tree.hops(a, b) for a, b in pairs) / len(pairs) if pairs else 0.0
        level = None
        if index is not None:
            level = NODE_LEVEL if index == self.node_index else self.tree.levels[index]
        return GroupPlacement(level, path[-1] if path else None, found, order, hops, path)

    def _member_by_member(self, levels: Sequence[int], anywhere: bool) -> GroupPlacement | None:
        """Mixed requests: each allowed domain, members allocated in turn on its nodes."""
        domains: list[tuple[int | None, Path, list[str]]] = [
            (index, path, inside)
            for index in levels
            for path, inside in self._domains(index, every=True)
        ]
        if anywhere:
            domains.append((None, ANYWHERE, self._anywhere(every=True)))
        for index, path, inside in domains:
            found = first_fit(self.nodes, inside, self.ordered, self.engine)
            if found is not None:
                return self._placement(index, path, found)
        return None

    def _why(self, levels: Sequence[int], anywhere: bool) -> str:
        request = self.largest
        what = f"{self.need} member{'s' if self.need != 1 else ''} ({_describe(request)} each)"
        where = "no allowed domain"
        if self.spec.required is not None:
            where = f"no domain of {self.spec.required} (required)"
        if self.anchor is not None:
            where += f" inside {describe_domain(self.anchor.level, self.anchor.path)}"
        verb = "fits" if self.need == 1 else "fit"
        text = f"group {self.spec.key}: {what} {verb} in {where}; tried " + "; ".join(
            self.tried[: len(levels) + int(anywhere)] or ["nothing: no domain of an allowed level"]
        )
        if self.refusals:
            summary = max(self.refusals.items(), key=lambda kv: kv[1])[0]
            text += f"; {sum(self.refusals.values())} node(s) hold none (most: {summary})"
        if not self.nodes:
            text += "; no node is a candidate"
        return text


def first_fit(
    nodes: Mapping[str, NodeCandidate],
    order: Iterable[str],
    members: Sequence[Member],
    engine: Engine,
) -> dict[str, Assignment] | None:
    """A topology-blind gang, all or nothing: each member (rank order) on the first node in `order`
    that `allocate` takes it on (states copied)."""
    states: dict[str, NodeState] = {}
    found: dict[str, Assignment] = {}
    names = list(order)
    position = 0
    for member in members:
        gpus = sum(c.gpus for c in member.request.containers)
        while position < len(names):
            node = names[position]
            state = states.get(node) or nodes[node].state
            if state.free_gpu_count() >= gpus:
                try:
                    decision = allocate(
                        nodes[node].topology, state, member.request, node, engine=engine
                    )
                except UnsatisfiableError:
                    pass
                else:
                    if node not in states:
                        state = states[node] = state.copy()
                    state.apply(member.key, decision.assignment)
                    found[member.key] = decision.assignment
                    break
            position += 1
        else:
            return None
    return found


def _even(nodes: Sequence[str], caps: Mapping[str, int], need: int) -> list[tuple[str, int]]:
    """`need` members over `nodes` as evenly as their caps allow; nodes left with none dropped."""
    given: dict[str, int] = {}
    left = need
    for count, node in enumerate(sorted(nodes, key=lambda n: caps[n])):
        share = min(caps[node], -(-left // (len(nodes) - count)))
        given[node] = share
        left -= share
    return [(n, given[n]) for n in nodes if given[n]]


def _amounts(request: PodRequest) -> tuple[int, int, int]:
    """GPUs, exclusive CPUs and memory bytes the app containers ask: what bounds copies."""
    gpus = _gpus_of(request)
    whole = [c.integer_cpus for c in request.containers]
    exclusive = request.options.cpu is CpuMode.EXCLUSIVE and all(w is not None for w in whole)
    cpus = sum(w or 0 for w in whole) if exclusive else 0
    memory = sum(c.memory_bytes for c in request.containers)
    return gpus, cpus, memory


def _gpus_of(request: PodRequest) -> int:
    return sum(c.gpus for c in request.containers) + sum(
        c.gpus for c in request.init_containers if c.restartable
    )


def _size_key(request: PodRequest) -> tuple[int, int, int]:
    cpu = sum(c.cpu_milli for c in request.containers)
    memory = sum(c.memory_bytes for c in request.containers)
    return (_gpus_of(request), cpu, memory)


def _request_key(request: PodRequest) -> str:
    return repr((request.containers, request.init_containers, request.options))


def _describe(request: PodRequest) -> str:
    gpus = _gpus_of(request)
    cpus = sum(c.cpu_milli for c in request.containers) / 1000
    parts = []
    if gpus:
        names = {c.gpu_resource for c in request.containers if c.gpus}
        resource = names.pop() if len(names) == 1 and None not in names else "GPUs"
        parts.append(f"{gpus} {resource}")
    if cpus:
        parts.append(f"{cpus:g} CPUs")
    return ", ".join(parts) or "no CPUs or GPUs"
