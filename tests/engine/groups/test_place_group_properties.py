"""Invariants of `place_group` on random small leaf/spine clusters (hypothesis), and
agreement with a brute force that tries every domain of every allowed level."""

from __future__ import annotations

import os
from collections import Counter
from itertools import pairwise

from group_cluster import LEAF, SPINE, group, leaf_spine, members, occupy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numatopo_engine.allocation import Engine, allocate
from numatopo_engine.domains import DomainTree, NodeCandidate, place_group
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.groups import Strategy
from numatopo_engine.network_topology import HOSTNAME_LABEL
from numatopo_engine.request import PodRequest

EXAMPLES = int(os.environ.get("NUMATOPO_GROUP_EXAMPLES", "60"))
ENGINE = Engine()  # memo tables only: answers never depend on them


Shape = tuple[int, int, int, list[int]]


@st.composite
def clusters(draw: st.DrawFn) -> Shape:
    """Spines, leaves per spine, nodes per leaf, and the GPUs busy on each node (plain
    values, so a failing example prints short)."""
    spines, leaves, per_leaf = (
        draw(st.integers(1, 2)),
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
    )
    busy = draw(
        st.lists(
            st.sampled_from([0, 0, 1, 2, 4, 6, 8]),
            min_size=spines * leaves * per_leaf,
            max_size=spines * leaves * per_leaf,
        )
    )
    return spines, leaves, per_leaf, busy


def build(shape: Shape) -> tuple[DomainTree, dict[str, NodeCandidate]]:
    spines, leaves, per_leaf, busy = shape
    tree, nodes = leaf_spine(spines, leaves, per_leaf)
    for name, gpus in zip(nodes, busy, strict=True):
        if gpus:
            occupy(nodes, name, gpus)
    return tree, nodes


def copies(candidate: NodeCandidate, request: PodRequest, node: str, most: int) -> int:
    """How many copies of `request` the node takes one after another (the reference)."""
    state = candidate.state.copy()
    for count in range(most):
        try:
            decision = allocate(candidate.topology, state, request, node, engine=ENGINE)
        except UnsatisfiableError:
            return count
        state.apply(f"x/{count}", decision.assignment)
    return most


def narrowest_fitting_level(
    tree: DomainTree,
    nodes: dict[str, NodeCandidate],
    request: PodRequest,
    size: int,
    top: int,
    *,
    one_per_node: bool = False,
    node_level: bool = True,
) -> int | None:
    """The narrowest level with a domain holding `size`; `len(tree.levels)`: one node."""
    held = {n: copies(c, request, n, size) for n, c in nodes.items()}
    if one_per_node:
        held = {n: min(1, c) for n, c in held.items()}
    if node_level and max(held.values(), default=0) >= size:
        return len(tree.levels)
    for index in range(len(tree.levels) - 1, top - 1, -1):
        for inside in tree.members[index].values():
            if sum(held[n] for n in inside) >= size:
                return index
    return None


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    clusters(),
    st.integers(1, 6),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([None, SPINE, LEAF]),
    st.sampled_from(list(Strategy)),
)
def test_placement_invariants(
    cluster: Shape,
    size: int,
    gpus: int,
    required: str | None,
    strategy: Strategy,
) -> None:
    tree, nodes = build(cluster)
    group_members = members(size, gpus)
    spec = group(size, required=required, strategy=strategy)
    top = 0 if required is None else tree.depth[required]
    expected = narrowest_fitting_level(tree, nodes, group_members[0].request, size, top)
    if strategy is Strategy.DISTRIBUTED:
        spread = narrowest_fitting_level(
            tree, nodes, group_members[0].request, size, top, one_per_node=True
        )
        if spread is not None:
            expected = spread
        else:
            if expected == len(tree.levels):  # the even spread skips the node level
                expected = narrowest_fitting_level(
                    tree, nodes, group_members[0].request, size, top, node_level=False
                )
            if required is None:
                usable = sum(
                    min(1, copies(c, group_members[0].request, n, 1)) for n, c in nodes.items()
                )
                expected = None if usable >= size else expected
    versions = {n: c.state.version for n, c in nodes.items()}
    try:
        placed = place_group(tree, group_members, nodes, spec=spec, engine=ENGINE)
    except UnsatisfiableError:
        placed = None
    if placed is None:
        assert {n: c.state.version for n, c in nodes.items()} == versions
        if required is not None:
            assert expected is None
        else:  # anywhere: the cluster as a whole holds fewer than the group
            held = sum(copies(c, group_members[0].request, n, size) for n, c in nodes.items())
            assert held < size
        return
    assert {n: c.state.version for n, c in nodes.items()} == versions  # nothing mutated
    # all or nothing
    assert sorted(placed.assignments) == sorted(m.key for m in group_members)
    assert placed.order == [m.key for m in group_members]
    # never double-books: every assignment books on the original states
    for node, candidate in nodes.items():
        state = candidate.state.copy()
        for key, assignment in placed.assignments.items():
            if assignment.node == node:
                state.apply(key, assignment)
        assert state.free_gpu_count() >= 0
    where = [placed.assignments[k].node for k in placed.order]
    # inside one domain of the required level, and the narrowest level that fits
    if required is not None:
        assert len({tree.domain_of(n, required) for n in where}) == 1
    if expected == len(tree.levels):
        assert placed.level == HOSTNAME_LABEL
        assert len(set(where)) == 1
        assert placed.path == (*tree.paths[where[0]], where[0])
    elif expected is not None:
        assert placed.level == tree.levels[expected]
        assert len({tree.paths[n][: expected + 1] for n in where}) == 1
        assert placed.path == tree.paths[where[0]][: expected + 1]
    else:
        assert placed.level is None
    # ranks contiguous: a node, and a leaf, is one run of consecutive ranks
    for key_of in (lambda n: n, lambda n: tree.paths[n]):
        runs = [k for k, _ in _runs([key_of(n) for n in where])]
        assert len(runs) == len(set(runs))
    hops = [tree.hops(a, b) for a, b in pairwise(where)]
    assert placed.neighbour_hops == (sum(hops) / len(hops) if hops else 0.0)
    counts = Counter(where)
    if strategy is Strategy.DISTRIBUTED and len(counts) < size:
        # fallback only when no allowed domain has a node per member
        top_nodes = [
            len([n for n in inside if copies(nodes[n], group_members[0].request, n, 1)])
            for index in range(top, len(tree.levels))
            for inside in tree.members[index].values()
        ]
        if required is not None:
            assert max(top_nodes, default=0) < size
    if strategy is Strategy.BALANCED:
        assert max(counts.values()) - min(counts.values()) <= max(counts.values())


def _runs(values: list[object]) -> list[tuple[object, int]]:
    out: list[tuple[object, int]] = []
    for value in values:
        if out and out[-1][0] == value:
            out[-1] = (value, out[-1][1] + 1)
        else:
            out.append((value, 1))
    return out


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([0, 1, 2, 4, 6, 8]), min_size=1, max_size=5), st.integers(1, 8))
def test_consolidated_uses_fewest_nodes_in_one_leaf(busy: list[int], size: int) -> None:
    """Within one leaf the node count is the brute-force minimum (top-k copies)."""
    tree, nodes = leaf_spine(1, 1, len(busy))
    for name, gpus in zip(nodes, busy, strict=True):
        if gpus:
            occupy(nodes, name, gpus)
    group_members = members(size, 2)
    held = sorted(
        (copies(c, group_members[0].request, n, size) for n, c in nodes.items()), reverse=True
    )
    fewest = next((k for k in range(1, len(held) + 1) if sum(held[:k]) >= size), None)
    try:
        placed = place_group(
            tree, group_members, nodes, spec=group(size, required=LEAF), engine=ENGINE
        )
    except UnsatisfiableError:
        assert fewest is None
        return
    assert len({a.node for a in placed.assignments.values()}) == fewest
