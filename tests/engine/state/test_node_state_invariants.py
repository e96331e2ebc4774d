"""`NodeState` under random apply/release sequences: never double-books, release undoes apply,
and its O(1) counters, change counter and free-state signature agree with its queries.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from numatopo_engine.annotations import Assignment
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import OverlapError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.state import NodeState

MiB = 2**20
PODS = ["ns/a", "ns/b", "ns/c", "ns/d"]

# Ids slightly beyond the node (CPU 8, GPU 4, NIC eth0) so refusals are exercised too.
containers = st.fixed_dictionaries(
    {
        "cpus": st.sets(st.integers(0, 8), max_size=4).map(lambda s: str(CPUSet(s))),
        "exclusive": st.booleans(),
        "gpuIndices": st.lists(st.integers(0, 4), max_size=2),
        "nics": st.lists(st.sampled_from(["mlx5_0", "mlx5_1", "eth0"]), max_size=1),
        "memory": st.dictionaries(
            st.sampled_from(["0", "1"]), st.integers(0, 700).map(lambda n: n * MiB)
        ),
        "hugepages": st.dictionaries(
            st.sampled_from(["0", "1"]),
            st.dictionaries(
                st.sampled_from(["2Mi", "1Gi"]), st.integers(0, 5).map(lambda n: n * 2 * MiB)
            ),
        ),
    }
)
assignments = st.dictionaries(st.sampled_from(["x", "y"]), containers, min_size=1).map(
    lambda c: Assignment.model_validate({"node": "n", "containers": c})
)
steps = st.lists(
    st.tuples(st.sampled_from(["apply", "release"]), st.sampled_from(PODS), assignments),
    max_size=12,
)


def snapshot(state: NodeState, node: NumatopologySpec) -> Any:
    return (
        state.free_cpus(),
        state.free_gpus(),
        state.free_nics(),
        [state.free_memory(n.id) for n in node.numa_nodes],
        [state.free_hugepages(n.id, size) for n in node.numa_nodes for size in ("2Mi", "1Gi")],
        dict(state.assignments),
    )


def check_consistent(state: NodeState, node: NumatopologySpec) -> None:
    """Held things are disjoint between pods, real, and exactly what is not free."""
    cpus: list[int] = []
    gpus: list[int] = []
    nics: list[str] = []
    for assignment in state.assignments.values():
        for container in assignment.containers.values():
            cpus += list(container.cpus) if container.exclusive else []
            gpus += container.gpu_indices
            nics += container.nics
    allocatable = node.online_cpus() - node.reserved_cpus

    assert len(cpus) == len(set(cpus))
    assert len(gpus) == len(set(gpus))
    assert len(nics) == len(set(nics))
    assert allocatable - CPUSet(cpus) == state.free_cpus()
    assert {g.index for g in node.gpus} - set(gpus) == state.free_gpus()
    assert {n.name for n in node.nics} - set(nics) == state.free_nics()
    for numa in node.numa_nodes:
        assert 0 <= state.free_memory(numa.id) <= numa.memory_bytes
        for size in ("2Mi", "1Gi"):
            assert 0 <= state.free_hugepages(numa.id, size)


@settings(max_examples=150, deadline=None)
@given(steps=steps)
def test_random_sequences_never_double_book(node: NumatopologySpec, steps: Any) -> None:
    state = NodeState(node)
    for action, pod, assignment in steps:
        before = snapshot(state, node)
        if action == "release":
            state.release(pod)
        else:
            try:
                state.apply(pod, assignment)
            except OverlapError:
                assert before == snapshot(state, node)
        check_consistent(state, node)


@settings(max_examples=100, deadline=None)
@given(held=st.lists(st.tuples(st.sampled_from(PODS), assignments), max_size=4), new=assignments)
def test_release_restores_what_apply_took(
    node: NumatopologySpec, held: list[tuple[str, Assignment]], new: Assignment
) -> None:
    """Applying a new pod and releasing it leaves the node as it was."""
    state, _ = NodeState.rebuild(node, held)
    before = snapshot(state, node)
    try:
        state.apply("ns/new", new)
    except OverlapError:
        return
    state.release("ns/new")

    assert before == snapshot(state, node)


def _play(node: NumatopologySpec, steps: Any) -> list[NodeState]:
    """Run the steps on one state; returns a copy of it after every step."""
    state = NodeState(node)
    seen = [state.copy()]
    for action, pod, assignment in steps:
        if action == "release":
            state.release(pod)
        else:
            with contextlib.suppress(OverlapError):
                state.apply(pod, assignment)
        seen.append(state.copy())
    return seen


def _counts(state: NodeState, node: NumatopologySpec) -> tuple[int, int, int, frozenset[int]]:
    return (
        len(state.free_cpus()),
        len(state.free_gpus()),
        sum(state.free_memory(n.id) for n in node.numa_nodes),
        state.free_cpus().ids,
    )


@settings(max_examples=100, deadline=None)
@given(steps=steps)
def test_counters_equal_the_queries_they_shortcut(node: NumatopologySpec, steps: Any) -> None:
    for state in _play(node, steps):
        expected = _counts(state, node)

        actual = (
            state.free_cpu_count(),
            state.free_gpu_count(),
            state.free_memory_total(),
            state.free_cpu_ids(),
        )

        assert expected == actual


@settings(max_examples=100, deadline=None)
@given(steps=steps)
def test_equal_signatures_mean_equal_free_resources(node: NumatopologySpec, steps: Any) -> None:
    """Signatures are equal exactly when every `free_*` query answers the same."""
    states = _play(node, steps)
    for a in states:
        for b in states:
            expected = snapshot(a, node)[:5] == snapshot(b, node)[:5]

            actual = a.free_signature() == b.free_signature()

            assert expected == actual


def test_version_moves_on_every_change_and_only_then(node: NumatopologySpec) -> None:
    state = NodeState(node)
    versions = [state.version]
    held = {"x": {"cpus": "1", "gpuIndices": [0]}}
    state.apply("ns/a", Assignment.model_validate({"node": "n", "containers": held}))
    versions.append(state.version)
    state.free_signature()
    state.release("ns/missing")
    versions.append(state.version)
    state.release("ns/a")
    versions.append(state.version)

    assert [0, 1, 1, 2] == versions
