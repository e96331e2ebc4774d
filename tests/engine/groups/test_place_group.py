"""`place_group`: all or nothing, inside one domain, smallest domain first, ranks in order."""

from __future__ import annotations

from collections import Counter

import pytest
from group_cluster import LEAF, SPINE, group, leaf_spine, members, occupy

from numatopo_engine.domains import (
    Anchor,
    DomainTree,
    GroupPlacement,
    NodeCandidate,
    domain_fragmentation,
    domain_utilization,
    place_group,
)
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.groups import Strategy
from numatopo_engine.request import ContainerRequest, PodRequest


def place(
    tree: DomainTree, nodes: dict[str, NodeCandidate], count: int, gpus: int = 8, **kw: object
) -> GroupPlacement:
    return place_group(tree, members(count, gpus), nodes, spec=group(count, **kw))  # type: ignore[arg-type]


def per_node(placed: GroupPlacement) -> Counter[str]:
    return Counter(a.node for a in placed.assignments.values())


def leaves(tree: DomainTree, placed: GroupPlacement) -> list[str]:
    """Leaves of the members in rank order, consecutive repeats dropped."""
    out: list[str] = []
    for key in placed.order:
        leaf = tree.domain_of(placed.assignments[key].node, LEAF)
        assert leaf is not None
        if not out or out[-1] != leaf:
            out.append(leaf)
    return out


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
    assert tree.domain_of("a", "unknown") is None
    assert [tree.hops("a", x) for x in "abcde"] == [0, 1, 2, 3, 3]
    assert list(tree.domains(LEAF)) == [("s0", "l0"), ("s0", "l1"), ("s1", "l2")]


def test_reused_leaf_value_under_two_spines_are_two_domains() -> None:
    tree = DomainTree.build(
        (SPINE, LEAF), {"a": {SPINE: "s0", LEAF: "r1"}, "b": {SPINE: "s1", LEAF: "r1"}}
    )
    assert len(tree.domains(LEAF)) == 2
    assert tree.hops("a", "b") == 3


@pytest.mark.parametrize(
    ("count", "node_count", "leaf_count"),
    [(2, 2, 1), (4, 4, 1), (8, 8, 2), (16, 16, 4)],
)
def test_nod_ai_promises(count: int, node_count: int, leaf_count: int) -> None:
    """2 nodes in one leaf, 4 a whole leaf, 8 two leaves, 16 four (8-GPU members)."""
    tree, nodes = leaf_spine(2, 4, 4)
    placed = place(tree, nodes, count, required=SPINE)
    assert len(per_node(placed)) == node_count
    assert len(leaves(tree, placed)) == leaf_count
    spines = {tree.domain_of(a.node, SPINE) for a in placed.assignments.values()}
    assert len(spines) == 1
    assert placed.level == (LEAF if leaf_count == 1 else SPINE)


def test_smallest_fitting_domain_keeps_the_empty_leaf() -> None:
    tree, nodes = leaf_spine(1, 3, 4)
    for i in range(2):  # leaf 1 half busy: its two free nodes fit a 2-node group exactly
        occupy(nodes, f"n-0-1-{i:02d}", 8)
    occupy(nodes, "n-0-2-00", 8)  # leaf 2: three free nodes
    placed = place(tree, nodes, 2)
    assert placed.domain == "s0-l1"
    assert set(per_node(placed)) == {"n-0-1-02", "n-0-1-03"}


def test_busier_spine_first_between_equal_leaves() -> None:
    tree, nodes = leaf_spine(2, 2, 2)
    occupy(nodes, "n-1-0-00", 8)  # spine 1 is busier; its leaf 1 is as free as any
    placed = place(tree, nodes, 2)
    assert placed.domain == "s1-l1"


def test_consolidated_packs_small_members_on_one_node() -> None:
    tree, nodes = leaf_spine(1, 2, 4)
    placed = place(tree, nodes, 8, gpus=1)
    assert list(per_node(placed).values()) == [8]
    assert placed.neighbour_hops == 0.0


def test_consolidated_fills_partly_used_node_first() -> None:
    tree, nodes = leaf_spine(1, 1, 4)
    occupy(nodes, "n-0-0-02", 6)
    placed = place(tree, nodes, 2, gpus=1)
    assert set(per_node(placed)) == {"n-0-0-02"}


def test_distributed_one_member_per_node() -> None:
    tree, nodes = leaf_spine(1, 2, 4)
    placed = place(tree, nodes, 4, gpus=1, strategy=Strategy.DISTRIBUTED)
    assert sorted(per_node(placed).values()) == [1, 1, 1, 1]
    assert placed.level == LEAF


def test_distributed_falls_back_to_even_spread() -> None:
    tree, nodes = leaf_spine(1, 1, 4)
    placed = place(tree, nodes, 8, gpus=1, strategy=Strategy.DISTRIBUTED, required=LEAF)
    assert sorted(per_node(placed).values()) == [2, 2, 2, 2]


def test_balanced_equal_shares_on_fewest_nodes() -> None:
    tree, nodes = leaf_spine(1, 1, 4)
    occupy(nodes, "n-0-0-00", 6)  # 2 free: consolidated would use it, balanced cannot
    placed = place(tree, nodes, 5, gpus=2, strategy=Strategy.BALANCED)
    assert sorted(per_node(placed).values()) == [2, 3]
    assert "n-0-0-00" not in per_node(placed)
    consolidated = per_node(place(tree, nodes, 5, gpus=2))
    assert consolidated["n-0-0-00"] == 1  # the rest of the busy node: the exact fit
    assert sorted(consolidated.values()) == [1, 4]


def test_ranks_follow_the_tree() -> None:
    tree, nodes = leaf_spine(1, 4, 2)
    shuffled = members(8)[::-1]
    placed = place_group(tree, shuffled, nodes, spec=group(8))
    assert placed.order == [m.key for m in members(8)]
    where = [placed.assignments[k].node for k in placed.order]
    assert where == sorted(where)  # node names follow the tree
    assert len(leaves(tree, placed)) == 4
    assert placed.neighbour_hops == pytest.approx((4 * 1 + 3 * 2) / 7)


def test_unranked_members_after_ranked_by_name() -> None:
    tree, nodes = leaf_spine(1, 1, 4)
    pool = members(3)
    mixed = [
        pool[0],
        type(pool[1])("ml/z", None, pool[1].request),
        type(pool[2])("ml/a", None, pool[2].request),
    ]
    placed = place_group(tree, mixed, nodes, spec=group(3))
    assert placed.order == ["ml/w-0", "ml/a", "ml/z"]


def test_anchor_keeps_the_group_in_its_domain() -> None:
    tree, nodes = leaf_spine(2, 2, 2)
    occupy(nodes, "n-0-0-00", 8)
    placed = place_group(tree, members(1), nodes, spec=group(1), anchor=Anchor(SPINE, ("s1",)))
    assert tree.domain_of(placed.assignments["ml/w-0"].node, SPINE) == "s1"
    with pytest.raises(UnsatisfiableError, match=r"inside .*=s0-l0"):
        place_group(tree, members(2), nodes, spec=group(2), anchor=Anchor(LEAF, ("s0", "s0-l0")))


def test_unsatisfiable_names_level_domains_and_best() -> None:
    tree, nodes = leaf_spine(2, 2, 2)
    occupy(nodes, "n-0-0-00", 8)
    with pytest.raises(UnsatisfiableError) as caught:
        place(tree, nodes, 5, required=SPINE)
    text = caught.value.reason
    assert "ml/g" in text
    assert f"no domain of {SPINE} (required)" in text
    assert "2 domains of example.com/spine (the best, s1, holds 4 of 5)" in text
    assert "4 domains of example.com/leaf" in text
    assert "1 node(s) hold none" in text


def test_unknown_level_is_unsatisfiable() -> None:
    tree, nodes = leaf_spine(1, 1, 2)
    with pytest.raises(UnsatisfiableError, match="not a level"):
        place(tree, nodes, 1, required="example.com/rack")


def test_spreads_anywhere_only_without_required_level() -> None:
    tree, nodes = leaf_spine(2, 1, 2)
    placed = place(tree, nodes, 4)
    assert placed.level is None
    assert placed.domain is None
    assert len(per_node(placed)) == 4
    with pytest.raises(UnsatisfiableError):
        place(tree, nodes, 4, required=SPINE)


def test_unlabelled_nodes_only_anywhere() -> None:
    tree, nodes = leaf_spine(1, 1, 1)
    extra = next(iter(nodes.values()))
    nodes["bare"] = NodeCandidate(extra.topology, type(extra.state)(extra.topology))
    placed = place(tree, nodes, 2)
    assert set(per_node(placed)) == {"n-0-0-00", "bare"}
    with pytest.raises(UnsatisfiableError):
        place(tree, nodes, 2, required=LEAF)


def test_states_are_not_changed() -> None:
    tree, nodes = leaf_spine(1, 2, 2)
    before = {n: c.state.version for n, c in nodes.items()}
    place(tree, nodes, 3)
    assert {n: c.state.version for n, c in nodes.items()} == before


def test_mixed_requests_launcher_and_workers() -> None:
    tree, nodes = leaf_spine(1, 1, 2)
    workers = members(2)
    launcher_request = PodRequest(
        "ml",
        "launcher",
        (ContainerRequest(name="c", cpu_milli=2000),),
        options=workers[0].request.options,
    )
    launcher = type(workers[0])("ml/launcher", None, launcher_request)
    placed = place_group(tree, [launcher, *workers], nodes, spec=group(3))
    assert set(placed.assignments) == {"ml/w-0", "ml/w-1", "ml/launcher"}
    for key, cand in nodes.items():  # booking everything on the original states works
        state = cand.state.copy()
        for member, assignment in placed.assignments.items():
            if assignment.node == key:
                state.apply(member, assignment)


def test_metrics() -> None:
    tree, nodes = leaf_spine(1, 2, 2)
    assert domain_fragmentation(tree, nodes) == {SPINE: 0.0, LEAF: 0.0}
    occupy(nodes, "n-0-0-00", 8)
    util = domain_utilization(tree, nodes)
    assert util[(LEAF, "s0-l0")] == 0.5
    assert util[(LEAF, "s0-l1")] == 0.0
    assert util[(SPINE, "s0")] == 0.25
    frag = domain_fragmentation(tree, nodes)
    # leaf: 8 free GPUs half-taken domain, 16 in a free one -> 8/24 * 0.5
    assert frag[LEAF] == pytest.approx(8 / 24 * 0.5)
    assert frag[SPINE] == pytest.approx(0.25)


def test_clique_and_hostname_levels() -> None:
    """NVLink cliques (nvidia.com/gpu.clique) over hostnames: one member stays on one
    node (the hostname level), two share a clique, five cannot share one of four nodes."""
    clique, host = "nvidia.com/gpu.clique", "kubernetes.io/hostname"
    _, nodes = leaf_spine(1, 2, 4)
    labels = {name: {clique: f"c{i // 4}", host: name} for i, name in enumerate(sorted(nodes))}
    tree = DomainTree.build((clique, host), labels)
    assert tree.hops(*sorted(nodes)[:2]) == 2  # one clique, two hostnames
    one = place_group(tree, members(1), nodes, spec=group(1, required=clique))
    assert one.level == host
    two = place_group(tree, members(2), nodes, spec=group(2, required=clique))
    assert two.level == clique
    with pytest.raises(UnsatisfiableError, match=r"2 domains of nvidia\.com/gpu\.clique"):
        place_group(tree, members(5), nodes, spec=group(5, required=clique))


def test_preferred_level_falls_back_to_wider_then_anywhere() -> None:
    tree, nodes = leaf_spine(2, 2, 2)
    in_leaf = place(tree, nodes, 2, preferred=LEAF)
    assert in_leaf.level == LEAF
    in_spine = place(tree, nodes, 3, preferred=LEAF)
    assert in_spine.level == SPINE
    anywhere = place(tree, nodes, 6, preferred=LEAF)
    assert anywhere.level is None


def test_no_candidate_nodes_says_so() -> None:
    tree, _ = leaf_spine(1, 2, 2)
    with pytest.raises(UnsatisfiableError, match="no node is a candidate"):
        place_group(tree, members(1), {}, spec=group(1, required=SPINE))
