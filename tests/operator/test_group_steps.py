"""`group_members.next_step` and the phase-2 patch: the rules of the group protocol (pure)."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment
from numatopo_engine.domains import NODE_LEVEL, Anchor, DomainTree
from numatopo_engine.groups import GroupSpec, Strategy
from numatopo_operator import settings
from numatopo_operator.groups import release as group_release
from numatopo_operator.groups.members import (
    GATE,
    GroupBook,
    PlacementRecord,
    ReleaseError,
    StepKind,
    next_step,
    release_operations,
)

PLAN_A = "2026-01-01T00:00:00.000001+00:00"
PLAN_B = "2026-01-01T00:00:05.000001+00:00"


def pod(
    name: str,
    *,
    size: int = 3,
    gated: bool = True,
    plan: str | None = None,
    node: str = "n1",
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    annotations = {keys.GROUP: "g", keys.GROUP_SIZE: str(size), **(extra or {})}
    if plan is not None:
        record = PlacementRecord(group="g", level="l2", domain="b1", planned=plan)
        annotations[keys.GROUP_PLACEMENT] = record.to_annotation()
        annotations[keys.ASSIGNMENT] = Assignment(
            node=node, policy="none", numa_nodes=[0], containers={}
        ).to_annotation()
    spec: dict[str, Any] = {"containers": []}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"metadata": {"name": name, "namespace": "ns", "annotations": annotations}, "spec": spec}


def step(*pods: dict[str, Any]) -> tuple[StepKind, tuple[str, ...]]:
    book = GroupBook()
    for body in pods:
        book.observe(body)
    found = next_step(book.specs("ns/g"), book.views("ns/g"))
    return found.kind, tuple(k.partition("/")[2] for k in found.keys)


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([pod("a"), pod("b")], (StepKind.WAIT, ("a", "b")), id="fewer-than-size"),
        pytest.param(
            [pod("a"), pod("b"), pod("c")], (StepKind.PLAN, ("a", "b", "c")), id="complete"
        ),
        pytest.param(
            [pod("a", plan=PLAN_A), pod("b", plan=PLAN_A), pod("c")],
            (StepKind.VOID, ("a", "b")),
            id="half-planned-is-voided",
        ),
        pytest.param(
            [pod("a", plan=PLAN_A), pod("b", plan=PLAN_A), pod("c", plan=PLAN_B)],
            (StepKind.VOID, ("a", "b", "c")),
            id="two-plans-are-voided",
        ),
        pytest.param(
            [pod("a", plan=PLAN_A), pod("b", plan=PLAN_A)],
            (StepKind.VOID, ("a", "b")),
            id="planned-group-below-its-size-is-voided",
        ),
        pytest.param(
            [pod("a", plan=PLAN_A), pod("b", plan=PLAN_A), pod("c", plan=PLAN_A)],
            (StepKind.RELEASE, ("a", "b", "c")),
            id="complete-plan-is-released",
        ),
        pytest.param(
            [pod("a", plan=PLAN_A, gated=False), pod("b", plan=PLAN_A), pod("c")],
            (StepKind.RELEASE, ("b",)),
            id="running-group-releases-planned-members-first",
        ),
        pytest.param(
            [pod("a", plan=PLAN_A, gated=False), pod("b", plan=PLAN_A, gated=False), pod("c")],
            (StepKind.RECOVER, ("c",)),
            id="replacement-of-a-running-group",
        ),
        pytest.param(
            [pod("a", plan=PLAN_A, gated=False), pod("b", gated=False)],
            (StepKind.IDLE, ()),
            id="nothing-gated",
        ),
        pytest.param(
            [pod("a"), pod("b", size=2), pod("c")],
            (StepKind.INVALID, ("a", "b", "c")),
            id="members-disagree",
        ),
    ],
)
def test_next_step(pods: list[dict[str, Any]], expected: tuple[StepKind, tuple[str, ...]]) -> None:
    assert expected == step(*pods)


def test_an_unreadable_placement_record_voids_the_plan() -> None:
    broken = pod("c", plan=PLAN_A)
    broken["metadata"]["annotations"][keys.GROUP_PLACEMENT] = "{not json"

    assert (StepKind.VOID, ("a", "b", "c")) == step(
        pod("a", plan=PLAN_A), pod("b", plan=PLAN_A), broken
    )


def test_a_bad_group_annotation_is_reported_not_grouped() -> None:
    book = GroupBook()

    touched = book.observe(pod("a", extra={keys.GROUP_SIZE: "many"}))

    assert (set(), ["ns/a"]) == (touched, list(book.invalid))
    assert keys.GROUP_SIZE in book.invalid["ns/a"]


@pytest.mark.parametrize(
    ("spec", "expected_spec"),
    [
        pytest.param(
            {"schedulingGates": [{"name": GATE}]},
            {"schedulingGates": [], "nodeSelector": {"kubernetes.io/hostname": "n7"}},
            id="only-our-gate",
        ),
        pytest.param(
            {
                "schedulingGates": [{"name": "other/gate"}, {"name": GATE}],
                "nodeSelector": {"gpu": "h100"},
            },
            {
                "schedulingGates": [{"name": "other/gate"}],
                "nodeSelector": {"gpu": "h100", "kubernetes.io/hostname": "n7"},
            },
            id="other-gates-and-selectors-stay",
        ),
    ],
)
def test_release_adds_the_node_and_removes_only_our_gate(
    spec: dict[str, Any], expected_spec: dict[str, Any]
) -> None:
    body = {"metadata": {"name": "a", "namespace": "ns"}, "spec": spec}

    patched = jsonpatch.apply_patch(body, release_operations(body, "n7"))

    assert expected_spec == patched["spec"]
    assert [] == release_operations(patched, "n7")


def test_release_refuses_a_pod_that_selects_another_node() -> None:
    body = {
        "metadata": {"name": "a", "namespace": "ns"},
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "nodeSelector": {"kubernetes.io/hostname": "x"},
        },
    }

    with pytest.raises(ReleaseError, match="selects node 'x' itself"):
        release_operations(body, "n7")


def test_release_guards_fail_on_a_pod_changed_since_it_was_read() -> None:
    read = {"metadata": {"name": "a"}, "spec": {"schedulingGates": [{"name": GATE}]}}
    now = {"metadata": {"name": "a"}, "spec": {"schedulingGates": [{"name": "other/gate"}]}}

    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(now, release_operations(read, "n7"))


@pytest.mark.parametrize(("text", "expected"), [("false", False), ("True", True), ("0", False)])
def test_groups_setting_reads_booleans(text: str, expected: bool) -> None:
    assert expected is settings.from_env({"NUMATOPO_GROUPS": text}).groups


def test_groups_setting_refuses_other_words() -> None:
    with pytest.raises(settings.SettingsError, match="is not a boolean"):
        settings.from_env({"NUMATOPO_GROUPS": "maybe"})


# -- where a replacement may go: the recorded domain by its full path ---------------------

SPINE, LEAF = "example.com/spine", "example.com/leaf"


def twin_leaves() -> DomainTree:
    """Leaf value l0 under two spines: n-a, n-b in s0; n-c, n-d in s1."""
    layout = {"n-a": "s0", "n-b": "s0", "n-c": "s1", "n-d": "s1"}
    return DomainTree.build([SPINE, LEAF], {n: {SPINE: s, LEAF: "l0"} for n, s in layout.items()})


def spec(required: str | None) -> GroupSpec:
    return GroupSpec("ml", "g", 2, required, None, Strategy.CONSOLIDATED, None)


def test_replacement_anchors_follow_the_recorded_path_up_to_the_required_level() -> None:
    record = PlacementRecord(group="g", level=LEAF, domain="l0", path=["s1", "l0"], planned=PLAN_A)
    assert [
        Anchor(LEAF, ("s1", "l0")),
        Anchor(SPINE, ("s1",)),
    ] == group_release.replacement_anchors(twin_leaves(), spec(SPINE), record, None)
    assert [
        Anchor(LEAF, ("s1", "l0")),
        Anchor(SPINE, ("s1",)),
        None,
    ] == group_release.replacement_anchors(twin_leaves(), spec(None), record, None)


def test_a_record_without_a_path_is_read_around_a_running_member() -> None:
    old = PlacementRecord.model_validate_json(
        '{"v":1,"group":"g","level":"example.com/leaf","domain":"l0","planned":"x"}'
    )
    tree = twin_leaves()
    assert Anchor(LEAF, ("s1", "l0")) == group_release.recorded_domain(tree, old, "n-d")
    # Ambiguous without a running member: a required level waits rather than guess.
    assert group_release.recorded_domain(tree, old, None) is None
    with pytest.raises(group_release.GroupUnplaceableError, match="rather than guess"):
        group_release.replacement_anchors(tree, spec(SPINE), old, None)
    assert [None] == group_release.replacement_anchors(tree, spec(None), old, None)


def test_a_one_node_record_anchors_the_node_then_its_leaf() -> None:
    record = PlacementRecord(
        group="g", level=NODE_LEVEL, domain="n-c", path=["s1", "l0", "n-c"], planned=PLAN_A
    )
    assert [
        Anchor(NODE_LEVEL, ("s1", "l0", "n-c")),
        Anchor(LEAF, ("s1", "l0")),
        Anchor(SPINE, ("s1",)),
    ] == group_release.replacement_anchors(twin_leaves(), spec(SPINE), record, None)


def test_a_lone_replacement_tries_its_neighbours_first_inside_the_group_domain() -> None:
    tree = twin_leaves()
    record = PlacementRecord(group="g", level=SPINE, domain="s0", path=["s0"], planned=PLAN_A)
    around = group_release.Around({0: "n-a", 2: "n-b", 3: "n-c"}, (1,))
    assert [
        Anchor(NODE_LEVEL, ("s0", "l0", "n-a")),
        Anchor(NODE_LEVEL, ("s0", "l0", "n-b")),
        Anchor(LEAF, ("s0", "l0")),
        Anchor(SPINE, ("s0",)),
    ] == group_release.replacement_anchors(tree, spec(SPINE), record, None, around)


def test_a_slice_replacement_stays_in_its_slice_domain() -> None:
    tree = twin_leaves()
    record = PlacementRecord(group="g", level=None, domain=None, planned=PLAN_A)
    sliced = GroupSpec("ml", "g", 4, None, None, Strategy.CONSOLIDATED, None, slice=(SPINE, 2))
    # Rank 3's slice is ranks 2 and 3; rank 2 runs on n-c, in spine s1.
    around = group_release.Around({0: "n-a", 1: "n-b", 2: "n-c"}, (3,))
    assert [
        Anchor(NODE_LEVEL, ("s1", "l0", "n-c")),
        Anchor(LEAF, ("s1", "l0")),
        Anchor(SPINE, ("s1",)),
    ] == group_release.replacement_anchors(tree, sliced, record, None, around)
    # The whole slice lost: no domain of its own to keep; the engine keeps it whole.
    lost = group_release.Around({0: "n-a", 1: "n-b"}, (2, 3))
    assert [None] == group_release.replacement_anchors(tree, sliced, record, None, lost)
