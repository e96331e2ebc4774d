"""Inside the chosen domain: the fewest sub-domains at every level, then the fewest nodes
(the node is the implicit narrowest level when the topology has no hostname level)."""

from __future__ import annotations

from collections import Counter

import pytest
from group_cluster import LEAF, SPINE, group, members, occupy, shape

from numatopo_engine.domains import DomainTree, NodeCandidate, place_group
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.groups import GroupSpec, Strategy
from numatopo_engine.network_topology import HOSTNAME_LABEL
from numatopo_engine.state import NodeState

BLOCK = "example.com/block"


def cluster(
    levels: tuple[str, ...], layout: dict[str, tuple[tuple[str, ...], int]]
) -> tuple[DomainTree, dict[str, NodeCandidate]]:
    """node -> (its label values widest first, free GPUs of 8)."""
    topology = shape()
    labels: dict[str, dict[str, str]] = {}
    nodes: dict[str, NodeCandidate] = {}
    for name, (values, free) in layout.items():
        labels[name] = dict(zip(levels, values, strict=True))
        nodes[name] = NodeCandidate(topology, NodeState(topology))
        if free < len(topology.gpus):
            occupy(nodes, name, len(topology.gpus) - free)
    return DomainTree.build(levels, labels), nodes


def by_node(
    tree: DomainTree, nodes: dict[str, NodeCandidate], count: int, **kw: object
) -> Counter[str]:
    spec = group(count, **kw)  # type: ignore[arg-type]
    placed = place_group(tree, members(count, 1, 1), nodes, spec=spec)
    return Counter(placed.assignments[k].node for k in placed.order)


@pytest.mark.parametrize("strategy", [Strategy.CONSOLIDATED, Strategy.BALANCED])
def test_fewest_nodes_inside_the_spine(strategy: Strategy) -> None:
    """Leaf l0: a, b with 2 free GPUs each; leaf l1: c with 3. Five 1-GPU members fit on
    c and one of a, b: two nodes, not a, a, b, b, c."""
    tree, nodes = cluster(
        (SPINE, LEAF),
        {"a": (("s0", "l0"), 2), "b": (("s0", "l0"), 2), "c": (("s0", "l1"), 3)},
    )
    placed = by_node(tree, nodes, 5, required=SPINE, strategy=strategy)
    assert placed["c"] == 3
    assert sorted(placed.values()) == [2, 3]


def test_fewest_leaves_inside_the_block() -> None:
    """Block b0: spine S1 with leaves x (3 free) and y (1 free), spine S2 with leaf z (3
    free). Five members take z x3 and x x2: two leaves, not x, y and z."""
    tree, nodes = cluster(
        (BLOCK, SPINE, LEAF),
        {
            "x": (("b0", "S1", "x"), 3),
            "y": (("b0", "S1", "y"), 1),
            "z": (("b0", "S2", "z"), 3),
        },
    )
    placed = by_node(tree, nodes, 5, required=BLOCK)
    assert placed == Counter({"z": 3, "x": 2})


def test_a_group_that_fits_one_node_takes_one_node() -> None:
    """No hostname level: the node is the implicit narrowest level, so two 1-GPU members
    go to c (8 free) rather than to a and b (1 free each) of the busier leaf."""
    tree, nodes = cluster(
        (SPINE, LEAF),
        {"a": (("s0", "l0"), 1), "b": (("s0", "l0"), 1), "c": (("s0", "l1"), 8)},
    )
    spec = group(2)
    placed = place_group(tree, members(2, 1, 1), nodes, spec=spec)
    assert {a.node for a in placed.assignments.values()} == {"c"}
    assert (placed.level, placed.domain) == (HOSTNAME_LABEL, "c")
    assert placed.path == ("s0", "l1", "c")


def test_a_preferred_level_steers_to_the_fewest_of_its_domains() -> None:
    """No leaf holds the 4 members. Spine s0 needs three leaves (1 + 1 + 2 free),
    spine s1 two (2 + 2): with preferred leaf, s1, though s0 is the busier spine."""
    tree, nodes = cluster(
        (SPINE, LEAF),
        {
            "a": (("s0", "l0"), 1),
            "b": (("s0", "l1"), 1),
            "c": (("s0", "l2"), 2),
            "d": (("s1", "l0"), 2),
            "e": (("s1", "l1"), 2),
            "f": (("s1", "l2"), 8),
            "g": (("s1", "l2"), 8),
        },
    )
    occupy(nodes, "f", 7)
    occupy(nodes, "g", 7)
    # Without a preference the busier spine s0 wins (least fragmentation growth).
    assert {tree.domain_of(n, SPINE) for n in by_node(tree, nodes, 4)} == {"s0"}
    placed = by_node(tree, nodes, 4, preferred=LEAF)
    assert {tree.domain_of(n, SPINE) for n in placed} == {"s1"}
    assert len({tree.paths[n] for n in placed}) == 2


def test_at_most_n_members_per_domain() -> None:
    """`max-members-per-domain` leaf=2: six members over three leaves, two each, even
    where one leaf could take all six."""
    tree, nodes = cluster(
        (SPINE, LEAF),
        {
            "a": (("s0", "l0"), 8),
            "b": (("s0", "l1"), 8),
            "c": (("s0", "l2"), 8),
            "d": (("s0", "l3"), 8),
        },
    )
    spec = GroupSpec("ml", "g", 6, SPINE, None, Strategy.CONSOLIDATED, None, (LEAF, 2))
    placed = place_group(tree, members(6, 1, 1), nodes, spec=spec)
    assert sorted(Counter(a.node for a in placed.assignments.values()).values()) == [2, 2, 2]
    assert placed.level == SPINE
    too_many = GroupSpec("ml", "g", 6, LEAF, None, Strategy.CONSOLIDATED, None, (LEAF, 2))
    with pytest.raises(UnsatisfiableError):
        place_group(tree, members(6, 1, 1), nodes, spec=too_many)
