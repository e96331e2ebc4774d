"""Inside one domain: which nodes take how many members (pure, exact).

The lexicographic minimum, over every set of nodes whose capacities ("units": members
each node can take) cover the need, of the cost vector

    (domains used at level d+1, ..., domains used at the narrowest level, nodes,
     units left unused, fragmentation growth, wholly free nodes broken, -rank)

(docs/DESIGN.md, "Nodes inside the chosen domain", says why a greedy is not enough).
Method: a knapsack over each domain's children, bottom up. A domain's table holds, for
every amount up to min(need, its units), the least cost of hosting that many members
inside it; a parent combines its children's tables one child at a time, adding 1 at
the child's level for every child used. Cost vectors add component-wise and the
lexicographic order is compatible with addition, so optimal parts combine into an
optimum. Time: the sum over domains of need x the domain's children's units.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import add
from typing import Protocol

__all__ = ["Cost", "Tree", "fewest"]

Path = tuple[str, ...]
Cost = tuple[float, ...]
# (cost, what was chosen): the chosen parts as a linked list (earlier parts, item, amount)
_Entry = tuple[Cost, object]


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
    """The least-cost choice of `need` members inside domain `root` (see the module
    docstring): its cost vector and (node, members) in tree order; None when the units
    of the domain's nodes add up to less than `need`.

    `units`: node -> members it can take (nodes not listed take none); `loose`: extra
    nodes directly under `root` (nodes without labels, for the root `()`); `tie`: per
    node (wholly free nodes broken, minus its rank), the last tie-breaks; `growth`: what
    taking an amount of members from a node or a domain (by path) adds to fragmentation.
    `first`: a level index (`len(tree.levels)`: the nodes) whose count is compared before
    every other (a preferred level: as few of its domains as possible). `most_per`:
    (level index, n), at most n members in any one domain of that level (the node
    level included). `slices`: (level index, n), below a `root` wider than that level
    every domain of it (every node, for the node level) takes a multiple of n members
    and nodes outside its domains take none, so that members numbered in tree order
    fall in whole slices of n per domain.
    """
    width = len(tree.levels)
    # The first level's count again, level counts, nodes, units left unused,
    # fragmentation growth, free nodes broken, -rank; `shift` skips the leading one.
    shift = 1
    size = width + 6
    zero: Cost = (0.0,) * size
    limit_level, limit = most_per if most_per is not None else (-1, need)
    slice_level, piece = slices if slices is not None else (-1, 1)
    if slices is None or len(root) > slice_level:
        slice_level = -1  # the root lies inside one domain of the slice level

    def whole(level: int, amount: int) -> bool:
        return level != slice_level or amount % piece == 0

    tables: dict[object, list[_Entry | None]] = {}

    def node_table(node: str, most: int, depth: int) -> list[_Entry | None]:
        # A node of no domain of the first level (its labels stop above it) counts
        # as one such domain of its own.
        alone = first is not None and (first == width or depth <= first)
        held = min(units.get(node, 0), most, limit if limit_level == width else most)
        broken, minus_rank = tie(node)
        table: list[_Entry | None] = [None]
        for amount in range(1, held + 1):
            if not whole(width, amount):
                table.append(None)
                continue
            cost = [0.0] * size
            cost[0] = 1.0 if alone else 0.0
            cost[shift + width] = 1.0
            cost[shift + width + 1] = float(units[node] - amount)
            cost[shift + width + 2] = growth(node, amount)
            cost[shift + width + 3] = broken
            cost[shift + width + 4] = minus_rank
            table.append((tuple(cost), None))
        return table

    sums: dict[Path, int] = {}

    def held(domain: Path) -> int:
        total = sums.get(domain)
        if total is None:
            total = sum(units.get(n, 0) for n in tree.direct.get(domain, []))
            if domain == root:
                total += sum(units.get(n, 0) for n in loose)
            total += sum(held(child) for child in tree.children.get(domain, []))
            sums[domain] = total
        return total

    def domain_table(domain: Path, most: int) -> list[_Entry | None]:
        items: list[tuple[object, list[_Entry | None]]] = []
        for child in tree.children.get(domain, []):
            cap = min(held(child), most, limit if len(child) - 1 == limit_level else most)
            if cap:
                inner = domain_table(child, cap)
                tables[child] = inner
                shifted: list[_Entry | None] = [None]
                for amount, entry in enumerate(inner[1:], start=1):
                    if entry is None or not whole(len(child) - 1, amount):
                        shifted.append(None)
                        continue
                    mark = [0.0] * size
                    mark[0] = 1.0 if first == len(child) - 1 else 0.0
                    mark[shift + len(child) - 1] = 1.0
                    mark[shift + width + 2] = growth(child, amount)
                    shifted.append((_sum(entry[0], tuple(mark)), entry[1]))
                items.append((child, shifted))
        direct = list(tree.direct.get(domain, []))
        if domain == root:
            direct += loose
        for node in direct:
            if 0 <= slice_level < width and len(domain) <= slice_level:
                break  # in no domain of the slice level: holds no slice
            if units.get(node, 0):
                items.append((node, node_table(node, most, len(domain))))
        best: list[_Entry | None] = [None] * (most + 1)
        best[0] = (zero, None)
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

    def unroll(chosen: object, out: list[tuple[str, int]]) -> None:
        while chosen is not None:
            assert isinstance(chosen, tuple)
            chosen, item, amount = chosen
            if isinstance(item, str):
                out.append((item, amount))
            else:
                entry = tables[item][amount]
                assert entry is not None
                unroll(entry[1], out)

    if need <= 0 or held(root) < need:
        return None
    top = domain_table(root, need)[need]
    if top is None:
        return None
    out: list[tuple[str, int]] = []
    unroll(top[1], out)
    return top[0], out


def _sum(a: Cost, b: Cost) -> Cost:
    return tuple(map(add, a, b))
