"""Inside one domain: which nodes take how many members (pure, exact).

The lexicographic minimum, over every set of nodes whose capacities ("units": members each node can
take) cover the need, of the cost vector

    (domains used at level d+1, ..., domains used at the narrowest level, nodes,
     units left unused, fragmentation growth, wholly free nodes broken, -rank)

(docs/DESIGN.md, "Nodes inside the chosen domain", says why a greedy is not enough). Method: a
knapsack over each domain's children, bottom up. A domain's table holds, for every amount up to
min(need, its units), the least cost of hosting that many members inside it; a parent combines its
children's tables one child at a time, adding 1 at the child's level for every child used. Cost
vectors add component-wise and the lexicographic order is compatible with addition, so optimal parts
combine into an optimum. Time: the sum over domains of need x the domain's children's units.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import add
from typing import Protocol

Path = tuple[str, ...]
Cost = tuple[float, ...]
# (cost, what was chosen): the chosen parts as a linked list (earlier parts, item, amount)
_Entry = tuple[Cost, object]
_SHIFT = 1


class Tree(Protocol):
    """What `fewest` reads of a `domains.DomainTree`."""

    levels: tuple[str, ...]
    children: dict[Path, list[Path]]
    direct: dict[Path, list[str]]


def fewest(
    tree: Tree,
    root: Path,
    units: Mapping[str, int],
    need: int,
    *,
    loose: Sequence[str] = (),
    tie: Callable[[str], tuple[float, float]] = lambda _: (0.0, 0.0),
    growth: Callable[[str | Path, int], float] = lambda _, __: 0.0,
    first: int | None = None,
    most_per: tuple[int, int] | None = None,
    slices: tuple[int, int] | None = None,
) -> tuple[Cost, list[tuple[str, int]]] | None:
    """The least-cost choice of `need` members inside domain `root`: its cost vector and (node,
    members) in tree order; None when the nodes' units fall short.

    `units`: node -> members it can take; `loose`: extra nodes directly under `root` (unlabelled
    ones, for the root `()`); `tie`: per node (wholly free nodes broken, -rank), the last
    tie-breaks; `growth`: the fragmentation an amount taken from a node or domain (by path) adds.
    `first`: a level index (`len(tree.levels)`: nodes) whose count is compared before all others.
    `most_per`: (level index, n), at most n members per domain of that level. `slices`: (level
    index, n), every domain of that level below `root` takes a multiple of n and nodes outside its
    domains none, so members numbered in tree order fall in whole slices per domain."""
    if need <= 0:
        return None
    search = _Knapsack(tree, root, units, need, loose, tie, growth, first, most_per, slices)
    if search.held(root) < need:
        return None
    top = search.domain_table(root, need)[need]
    if top is None:
        return None
    out: list[tuple[str, int]] = []
    search.unroll(top[1], out)
    return top[0], out


@dataclass
class _Knapsack:
    """One `fewest` search. A cost vector holds the first level's count again, the level counts,
    nodes, units left unused, fragmentation growth, free nodes broken and -rank; `_SHIFT` skips the
    leading one."""

    tree: Tree
    root: Path
    units: Mapping[str, int]
    need: int
    loose: Sequence[str]
    tie: Callable[[str], tuple[float, float]]
    growth: Callable[[str | Path, int], float]
    first: int | None
    most_per: tuple[int, int] | None
    slices: tuple[int, int] | None
    tables: dict[object, list[_Entry | None]] = field(default_factory=dict)
    sums: dict[Path, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.width = len(self.tree.levels)
        self.size = self.width + 6
        self.limit_level, self.limit = self.most_per or (-1, self.need)
        self.slice_level, self.piece = self.slices or (-1, 1)
        if self.slices is None or len(self.root) > self.slice_level:
            self.slice_level = -1  # the root lies inside one domain of the slice level

    def whole(self, level: int, amount: int) -> bool:
        return level != self.slice_level or amount % self.piece == 0

    def held(self, domain: Path) -> int:
        total = self.sums.get(domain)
        if total is None:
            total = sum(self.units.get(n, 0) for n in self.tree.direct.get(domain, []))
            if domain == self.root:
                total += sum(self.units.get(n, 0) for n in self.loose)
            total += sum(self.held(child) for child in self.tree.children.get(domain, []))
            self.sums[domain] = total
        return total

    def node_table(self, node: str, most: int, depth: int) -> list[_Entry | None]:
        width, first = self.width, self.first
        # A node of no domain of the first level (labels stop above it) is one such domain itself.
        alone = first is not None and (first == width or depth <= first)
        cap = self.limit if self.limit_level == width else most
        held = min(self.units.get(node, 0), most, cap)
        broken, minus_rank = self.tie(node)
        table: list[_Entry | None] = [None]
        for amount in range(1, held + 1):
            if not self.whole(width, amount):
                table.append(None)
                continue
            cost = [0.0] * self.size
            cost[0] = 1.0 if alone else 0.0
            cost[_SHIFT + width :] = [1.0, float(self.units[node] - amount),
                                      self.growth(node, amount), broken, minus_rank]  # fmt: skip
            table.append((tuple(cost), None))
        return table

    def domain_table(self, domain: Path, most: int) -> list[_Entry | None]:
        items: list[tuple[object, list[_Entry | None]]] = []
        for child in self.tree.children.get(domain, []):
            level = len(child) - 1
            cap = min(self.held(child), most, self.limit if level == self.limit_level else most)
            if cap:
                inner = self.tables[child] = self.domain_table(child, cap)
                shifted: list[_Entry | None] = [None]
                for amount, entry in enumerate(inner[1:], start=1):
                    if entry is None or not self.whole(level, amount):
                        shifted.append(None)
                        continue
                    mark = [0.0] * self.size
                    mark[0] = 1.0 if self.first == level else 0.0
                    mark[_SHIFT + level] = 1.0
                    mark[_SHIFT + self.width + 2] = self.growth(child, amount)
                    shifted.append((_sum(entry[0], tuple(mark)), entry[1]))
                items.append((child, shifted))
        direct = list(self.tree.direct.get(domain, []))
        if domain == self.root:
            direct += self.loose
        for node in direct:
            if 0 <= self.slice_level < self.width and len(domain) <= self.slice_level:
                break  # in no domain of the slice level: holds no slice
            if self.units.get(node, 0):
                items.append((node, self.node_table(node, most, len(domain))))
        best: list[_Entry | None] = [None] * (most + 1)
        best[0] = ((0.0,) * self.size, None)
        for item, table in items:
            merged = list(best)
            for amount in range(1, most + 1):
                current = merged[amount]
                for part in range(1, min(len(table) - 1, amount) + 1):
                    before, entry = best[amount - part], table[part]
                    if before is None or entry is None:
                        continue
                    cost = _sum(before[0], entry[0])
                    if current is None or cost < current[0]:
                        current = (cost, (before[1], item, part))
                merged[amount] = current
            best = merged
        return best

    def unroll(self, chosen: object, out: list[tuple[str, int]]) -> None:
        while chosen is not None:
            assert isinstance(chosen, tuple)
            chosen, item, amount = chosen
            if isinstance(item, str):
                out.append((item, amount))
            else:
                entry = self.tables[item][amount]
                assert entry is not None
                self.unroll(entry[1], out)


def _sum(a: Cost, b: Cost) -> Cost:
    return tuple(map(add, a, b))
