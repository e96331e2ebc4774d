"""`NodeState`: booking, releasing, replacing and rebuilding assignments on one node."""

from __future__ import annotations

from typing import Any

import pytest

from numatopo_engine.annotations import Assignment
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import OverlapError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.state import NodeState

GiB = 2**30
MiB = 2**20


def assignment(**containers: dict[str, Any]) -> Assignment:
    """An assignment on the test node, containers given in wire form (camelCase)."""
    return Assignment.model_validate({"node": "dgx1v-01", "containers": containers})


def free(state: NodeState) -> tuple[str, list[int], list[str], int, int, int]:
    """Everything free on the node: CPUs, GPUs, NICs, memory on 0 and 1, 2Mi pages on 0."""
    return (
        str(state.free_cpus()),
        sorted(state.free_gpus()),
        sorted(state.free_nics()),
        state.free_memory(0),
        state.free_memory(1),
        state.free_hugepages(0, "2Mi"),
    )


EMPTY = ("1-3,5-7", [0, 1, 2, 3], ["mlx5_0", "mlx5_1"], GiB, GiB, 8 * MiB)


def test_empty_node_has_everything_but_reserved_cpus(node: NumatopologySpec) -> None:
    assert EMPTY == free(NodeState(node))


@pytest.mark.parametrize(
    ("booked", "expected"),
    [
        pytest.param(
            assignment(train={"cpus": "1,5", "gpuIndices": [0, 1], "nics": ["mlx5_0"]}),
            ("2-3,6-7", [2, 3], ["mlx5_1"], GiB, GiB, 8 * MiB),
            id="one-numa-node-with-devices",
        ),
        pytest.param(
            assignment(
                a={"cpus": "2", "memory": {"1": GiB // 2}},
                b={"cpus": "3", "memory": {"1": GiB // 4}, "hugepages": {"0": {"2Mi": 4 * MiB}}},
            ),
            ("1,5-7", [0, 1, 2, 3], ["mlx5_0", "mlx5_1"], GiB, GiB // 4, 4 * MiB),
            id="memory-and-hugepages-add-up-across-containers",
        ),
        pytest.param(
            assignment(web={"cpus": "1-3,5-7", "exclusive": False, "memory": {"0": 1}}),
            ("1-3,5-7", [0, 1, 2, 3], ["mlx5_0", "mlx5_1"], GiB - 1, GiB, 8 * MiB),
            id="shared-pool-container-books-no-cpus",
        ),
    ],
)
def test_apply_books_and_release_restores(
    node: NumatopologySpec, booked: Assignment, expected: tuple[Any, ...]
) -> None:
    state = NodeState(node)
    state.apply("ns/a", booked)
    after_apply = free(state)
    released = state.release("ns/a")

    assert expected == after_apply
    assert booked == released
    assert EMPTY == free(state)
    assert {} == state.assignments


@pytest.mark.parametrize(
    ("second", "problem"),
    [
        pytest.param(assignment(c={"cpus": "5"}), "CPU 5 is held by ns/first", id="cpu-held"),
        pytest.param(assignment(c={"gpuIndices": [1]}), "GPU 1 is held by ns/first", id="gpu-held"),
        pytest.param(
            assignment(c={"nics": ["mlx5_0"]}), "NIC mlx5_0 is held by ns/first", id="nic-held"
        ),
        pytest.param(assignment(c={"cpus": "4"}), "CPU 4 is reserved", id="reserved-cpu"),
        pytest.param(assignment(c={"cpus": "8"}), "CPU 8 is not online", id="cpu-not-on-node"),
        pytest.param(assignment(c={"gpuIndices": [9]}), "GPU 9 does not exist", id="no-such-gpu"),
        pytest.param(assignment(c={"nics": ["eth0"]}), "NIC eth0 does not exist", id="no-such-nic"),
        pytest.param(
            assignment(c={"cpus": "2"}, d={"cpus": "2"}),
            "container d: CPU 2 is given twice",
            id="cpu-twice-within-the-pod",
        ),
        pytest.param(assignment(c={"gpuIndices": [2, 2]}), "GPU 2 is given twice", id="gpu-twice"),
        pytest.param(
            assignment(c={"memory": {"0": GiB}}),
            f"memory on NUMA 0: {GiB} bytes booked, {GiB - MiB} free",
            id="memory-over-capacity",
        ),
        pytest.param(
            assignment(c={"memory": {"7": 1}}),
            "memory booked on unknown NUMA node 7",
            id="memory-on-unknown-numa",
        ),
        pytest.param(
            assignment(c={"hugepages": {"0": {"1Gi": GiB}}}, d={"hugepages": {"0": {"1Gi": 1}}}),
            f"hugepages-1Gi on NUMA 0: {GiB + 1} bytes booked, {GiB} free",
            id="hugepages-over-capacity",
        ),
        pytest.param(
            assignment(c={"hugepages": {"1": {"1Gi": GiB}}}),
            "hugepages-1Gi on NUMA 1: 1073741824 bytes booked, 0 free",
            id="hugepage-size-the-numa-node-lacks",
        ),
        pytest.param(
            assignment(c={"memory": {"1": -GiB}}),
            "container c: memory -1073741824 bytes is negative",
            id="negative-memory",
        ),
        pytest.param(
            assignment(c={"hugepages": {"0": {"2Mi": -1}}}),
            "container c: hugepages -1 bytes is negative",
            id="negative-hugepages",
        ),
        pytest.param(
            assignment(c={"hugepages": {"0": {"huge": 1}}}),
            "hugepages-huge: not a page size",
            id="unknown-page-size",
        ),
        pytest.param(
            assignment(c={"memory": {"1": -GiB}}, d={"memory": {"1": 2 * GiB}}),
            "container c: memory -1073741824 bytes is negative",
            id="negative-memory-cannot-offset-another-container",
        ),
        pytest.param(
            assignment(c={"hugepages": {"0": {"1" * 10_000 + "x": 1}}}),
            "hugepages-1111111111111111: not a page size",
            id="ten-thousand-character-page-size",
        ),
    ],
)
def test_conflicts_are_refused_naming_both_pods(
    node: NumatopologySpec, second: Assignment, problem: str
) -> None:
    state = NodeState(node)
    state.apply("ns/first", assignment(c={"cpus": "5", "gpuIndices": [1], "nics": ["mlx5_0"]}))
    state.apply("ns/mem", assignment(c={"memory": {"0": MiB}}))
    before = free(state)

    with pytest.raises(OverlapError) as caught:
        state.apply("ns/second", second)

    assert str(caught.value).startswith("assignment of ns/second rejected: ")
    assert problem in str(caught.value)
    assert before == free(state)
    assert ["ns/first", "ns/mem"] == sorted(state.assignments)


def test_reapplying_a_pod_replaces_its_booking(node: NumatopologySpec) -> None:
    state = NodeState(node)
    state.apply("ns/a", assignment(c={"cpus": "1-2", "gpuIndices": [0], "memory": {"0": GiB}}))

    state.apply("ns/a", assignment(c={"cpus": "2-3", "gpuIndices": [0], "memory": {"0": GiB}}))

    assert ("1,5-7", [1, 2, 3], 0) == (
        str(state.free_cpus()),
        sorted(state.free_gpus()),
        state.free_memory(0),
    )


def test_a_refused_replacement_keeps_the_old_booking(node: NumatopologySpec) -> None:
    state = NodeState(node)
    old = assignment(c={"cpus": "1", "gpuIndices": [0]})
    state.apply("ns/a", old)
    state.apply("ns/b", assignment(c={"cpus": "2"}))

    with pytest.raises(OverlapError, match="CPU 2 is held by ns/b"):
        state.apply("ns/a", assignment(c={"cpus": "2", "gpuIndices": [1]}))

    assert old == state.assignments["ns/a"]
    assert ("3,5-7", [1, 2, 3]) == (
        str(state.free_cpus()),
        sorted(state.free_gpus()),
    )


def test_exclusive_cpus_may_come_from_a_shared_pool_listing(node: NumatopologySpec) -> None:
    """A `cpu: numa` container lists the pool it saw; later exclusive grants may shrink it."""
    state = NodeState(node)
    state.apply("ns/shared", assignment(c={"cpus": "1-3,5-7", "exclusive": False}))

    state.apply("ns/pinned", assignment(c={"cpus": "2-3"}))

    assert CPUSet.parse("1,5-7") == state.free_cpus()


def test_release_of_an_unknown_pod_is_a_no_op(node: NumatopologySpec) -> None:
    state = NodeState(node)

    assert state.release("ns/ghost") is None
    assert EMPTY == free(state)


def test_rebuild_keeps_the_first_claim_and_returns_the_conflicts(node: NumatopologySpec) -> None:
    """Assignments are replayed in order; a later pod that double-books is skipped."""
    entries = [
        ("ns/a", assignment(c={"cpus": "1", "gpuIndices": [0]})),
        ("ns/b", assignment(c={"cpus": "1"})),
        ("ns/c", assignment(c={"gpuIndices": [1]})),
        ("ns/d", assignment(c={"gpuIndices": [0, 1]})),
    ]

    state, rejected = NodeState.rebuild(node, entries)

    assert ["ns/a", "ns/c"] == sorted(state.assignments)
    assert [
        "assignment of ns/b rejected: container c: CPU 1 is held by ns/a",
        "assignment of ns/d rejected: container c: GPU 0 is held by ns/a; "
        "container c: GPU 1 is held by ns/c",
    ] == [str(e) for e in rejected]


def test_copy_is_independent(node: NumatopologySpec) -> None:
    state = NodeState(node)
    state.apply("ns/a", assignment(c={"cpus": "1", "memory": {"0": 5}}))
    clone = state.copy()

    clone.apply("ns/b", assignment(c={"cpus": "2", "gpuIndices": [3]}))
    clone.release("ns/a")

    assert (CPUSet.parse("2-3,5-7"), ["ns/a"], GiB - 5) == (
        state.free_cpus(),
        sorted(state.assignments),
        state.free_memory(0),
    )
