"""`place_group`: all or nothing, inside one domain, smallest domain first."""

from __future__ import annotations

import pytest
from group_cluster import LEAF, SPINE, group, leaf_spine, members

from numatopo_engine.domains import DomainTree
from numatopo_engine.errors import UnsatisfiableError


def test_tree_domains_and_hops() -> None:
    tree = DomainTree.build(
        (SPINE, LEAF),
        {
            "a": {SPINE: "s0", LEAF: "l0"},
            "b": {SPINE: "s0", LEAF: "l0"},
            "c": {SPINE: "s0", LEAF: "l1"},
            "d": {SPINE: "s1", LEAF: "l2"},
            "e": {LEAF: "l0"},  # no spine label: no domain at any level
        },
    )
    assert tree.domain_of("a", LEAF) == "l0"
    assert tree.domain_of("e", LEAF) is None
    assert tree.domain_of("e", SPINE) is None
    assert tree.hops("a", "a") == 0
    assert tree.hops("a", "b") == 1
    assert tree.hops("a", "c") == 2
    assert tree.hops("a", "d") == 3
    assert tree.hops("a", "e") == 3


def test_two_nodes_in_one_leaf() -> None:
    tree, nodes = leaf_spine(2, 2, 4)
    placed = place(tree, nodes, 2, required=SPINE)
    assert placed.level == LEAF
    used = {a.node for a in placed.assignments.values()}
    assert len(used) == 2
    assert len({tree.domain_of(n, LEAF) for n in used}) == 1
    assert placed.neighbour_hops == 1.0


def test_too_big_for_any_spine_is_unsatisfiable() -> None:
    tree, nodes = leaf_spine(2, 2, 2)
    with pytest.raises(UnsatisfiableError):
        place(tree, nodes, 5, required=SPINE)


def place(tree, nodes, count, **kw):  # type: ignore[no-untyped-def]
    from numatopo_engine.domains import place_group

    return place_group(tree, members(count), nodes, spec=group(count, **kw))
