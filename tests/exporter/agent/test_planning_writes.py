"""The cpuset planner: safe order, idempotence, refusal of unreachable states."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numatopo_engine.cpuset import CPUSet
from numatopo_exporter.agent.planning import (
    Cpuset,
    CpusetWrite,
    PlanError,
    Target,
    desire_cpusets,
    plan_writes,
)

P = PurePosixPath
KUBEPODS, POD, CTR = P("kubepods"), P("kubepods/pod1"), P("kubepods/pod1/c1")


def cs(cpus: str, mems: str = "0") -> Cpuset:
    return Cpuset(CPUSet.parse(cpus), CPUSet.parse(mems))


def cpus(text: str) -> Target:
    return Target(cpus=CPUSet.parse(text))


@pytest.mark.parametrize(
    ("observed", "desired", "expected"),
    [
        pytest.param(
            {KUBEPODS: cs("0-7"), POD: cs("0-7"), CTR: cs("0-7")},
            {CTR: cpus("2-3")},
            [CpusetWrite(CTR, "cpuset.cpus", CPUSet.parse("2-3"))],
            id="narrowing-a-leaf-is-one-write",
        ),
        pytest.param(
            {KUBEPODS: cs("0-7"), POD: cs("0-1"), CTR: cs("0-1")},
            {POD: cpus("0-7"), CTR: cpus("4-7")},
            [
                CpusetWrite(POD, "cpuset.cpus", CPUSet.parse("0-7")),
                CpusetWrite(CTR, "cpuset.cpus", CPUSet.parse("0-1,4-7")),
                CpusetWrite(CTR, "cpuset.cpus", CPUSet.parse("4-7")),
            ],
            id="widening-goes-parent-first",
        ),
        pytest.param(
            {KUBEPODS: cs("0-7"), POD: cs("0-7"), CTR: cs("0-7")},
            {POD: cpus("0-3"), CTR: cpus("2-3")},
            [
                CpusetWrite(CTR, "cpuset.cpus", CPUSet.parse("2-3")),
                CpusetWrite(POD, "cpuset.cpus", CPUSet.parse("0-3")),
            ],
            id="narrowing-goes-child-first",
        ),
        pytest.param(
            {KUBEPODS: cs("0-7", "0-1"), POD: cs("0-7", "0"), CTR: cs("0-7", "0")},
            {POD: Target(mems=CPUSet.parse("0-1")), CTR: Target(mems=CPUSet.parse("1"))},
            [
                CpusetWrite(POD, "cpuset.mems", CPUSet.parse("0-1")),
                CpusetWrite(CTR, "cpuset.mems", CPUSet.parse("0-1")),
                CpusetWrite(CTR, "cpuset.mems", CPUSet.parse("1")),
            ],
            id="memory-nodes-follow-the-same-order",
        ),
        pytest.param(
            {KUBEPODS: cs("0-7"), POD: cs("0-7"), CTR: cs("2-3")},
            {CTR: cpus("2-3")},
            [],
            id="converged-is-no-write",
        ),
    ],
)
def test_plan_writes_orders_safely(
    observed: dict[PurePosixPath, Cpuset],
    desired: dict[PurePosixPath, Target],
    expected: list[CpusetWrite],
) -> None:
    actual = plan_writes(desired, observed)

    assert expected == actual


@pytest.mark.parametrize(
    ("observed", "desired", "message"),
    [
        pytest.param(
            {KUBEPODS: cs("0-3"), POD: cs("0-3")},
            {CTR: cpus("1")},
            "does not exist",
            id="missing-cgroup",
        ),
        pytest.param(
            {KUBEPODS: cs("0-3"), POD: cs("0-3"), CTR: cs("0-3")},
            {CTR: cpus("6-7")},
            "which its parent kubepods/pod1 would not have",
            id="child-outside-parent",
        ),
        pytest.param(
            {KUBEPODS: cs("0-3"), POD: cs("0-3"), CTR: cs("0-3")},
            {POD: cpus("0")},
            "kubepods/pod1/c1/cpuset.cpus would need 1-3",
            id="parent-narrowed-under-an-untouched-child",
        ),
        pytest.param(
            {KUBEPODS: cs("0-3"), POD: cs("0-3"), CTR: cs("0-3")},
            {CTR: Target(cpus=CPUSet())},
            "would be empty",
            id="empty-cpuset",
        ),
    ],
)
def test_plan_writes_refuses_unreachable_states(
    observed: dict[PurePosixPath, Cpuset], desired: dict[PurePosixPath, Target], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        plan_writes(desired, observed)


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[PurePosixPath, Cpuset], dict[PurePosixPath, Target]]:
    """A cgroup tree with a valid observed state and a random (maybe invalid) target."""
    cpu_count = draw(st.integers(2, 8))
    paths = [P("kubepods")]
    for _ in range(draw(st.integers(1, 6))):
        parent = draw(st.sampled_from(paths))
        paths.append(parent / f"g{len(paths)}")

    def subset_of(parent: CPUSet) -> CPUSet:
        chosen = draw(st.sets(st.sampled_from(parent.sorted()), min_size=1))
        return CPUSet(chosen)

    everything = CPUSet(range(cpu_count))
    observed: dict[PurePosixPath, Cpuset] = {}
    final: dict[PurePosixPath, CPUSet] = {}
    for path in paths:  # parents come before their children
        up = path.parent
        observed[path] = Cpuset(
            subset_of(observed[up].cpus if up in observed else everything), CPUSet([0])
        )
        final[path] = subset_of(final.get(up, everything))
    touched = draw(st.sets(st.sampled_from(paths), min_size=1))
    desired = {p: Target(cpus=final[p]) for p in touched}
    return observed, desired


def _simulate(
    observed: dict[PurePosixPath, Cpuset], writes: list[CpusetWrite]
) -> dict[PurePosixPath, CPUSet]:
    """Apply writes as cgroup v1 does: refuse any that breaks child ⊆ parent."""
    state = {p: c.cpus for p, c in observed.items()}
    for write in writes:
        state[write.path] = write.value
        for path, value in state.items():
            if path.parent in state:
                assert value <= state[path.parent], f"{write} broke {path} ⊆ {path.parent}"
    return state


@settings(max_examples=150, deadline=None)
@given(trees())
def test_plan_writes_reaches_the_target_through_valid_states_and_is_idempotent(
    tree: tuple[dict[PurePosixPath, Cpuset], dict[PurePosixPath, Target]],
) -> None:
    """Every intermediate state is one the kernel accepts, and replanning finds nothing."""
    observed, desired = tree
    try:
        writes = plan_writes(desired, observed)
    except PlanError:
        final = {p: c.cpus for p, c in observed.items()}
        final.update({p: t.cpus for p, t in desired.items() if t.cpus is not None})
        assert any(p.parent in final and not v <= final[p.parent] for p, v in final.items())
        return

    state = _simulate(observed, writes)
    after = {p: Cpuset(v, CPUSet([0])) for p, v in state.items()}

    assert all(state[p] == t.cpus for p, t in desired.items())
    assert [] == plan_writes(desired, after)


def test_desire_cpusets_keeps_other_containers_off_exclusive_cpus() -> None:
    """The shared pool is online minus exclusive; a NUMA-pool container is cut to it."""
    other, numa = P("kubepods/pod2/c2"), P("kubepods/pod3/c3")
    observed = {
        KUBEPODS: cs("0-7"),
        POD: cs("0-7"),
        CTR: cs("0-7"),
        P("kubepods/pod2"): cs("0-7"),
        other: cs("0-7"),
        P("kubepods/pod3"): cs("0-7"),
        numa: cs("0-7"),
    }

    actual = desire_cpusets(
        online=cs("0-7"),
        containers=[CTR, other, numa],
        exclusive_targets={CTR: Target(cpus=CPUSet.parse("2-3"), mems=CPUSet.parse("0"))},
        numa_targets={numa: Target(cpus=CPUSet.parse("0-3"))},
        exclusive=CPUSet.parse("2-3"),
        observed=observed,
    )

    expected = {
        CTR: Target(cpus=CPUSet.parse("2-3"), mems=CPUSet.parse("0")),
        other: Target(cpus=CPUSet.parse("0-1,4-7")),
        numa: Target(cpus=CPUSet.parse("0-1")),
    }
    assert expected == actual


def test_desire_cpusets_refuses_an_empty_shared_pool() -> None:
    with pytest.raises(PlanError, match="nothing would be left for the shared pool"):
        desire_cpusets(
            online=cs("0-1"),
            containers=[CTR],
            exclusive_targets={},
            numa_targets={},
            exclusive=CPUSet.parse("0-1"),
            observed={CTR: cs("0-1")},
        )
