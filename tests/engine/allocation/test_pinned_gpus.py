"""Pinned GPUs (Follow): a container that the kubelet gave other GPUs than assigned is
decided again with its real GPUs fixed; CPUs and memory move next to them."""

from __future__ import annotations

import pytest
from helpers import GiB, app, busy, pod
from hypothesis import given, settings
from hypothesis import strategies as st
from topologies import load

from numatopo_engine.allocation import Engine, allocate
from numatopo_engine.annotations import PolicyName, Scope
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.state import NodeState

DGX1 = load("dgx1-v100")  # GPUs 0-3 on NUMA 0, 4-7 on NUMA 1


def _numa_of_cpus(cpus: list[int]) -> set[int]:
    return {c.numa for c in DGX1.cpus if c.id in cpus}


def test_pinned_gpus_move_cpus_and_memory_to_their_numa_node() -> None:
    request = pod(app(4, 2, memory=8 * GiB), policy=PolicyName.SINGLE_NUMA_NODE)
    free = allocate(DGX1, NodeState(DGX1), request, "n").assignment
    assert free.numa_nodes == [0]  # unpinned, NUMA 0 is the natural choice

    pinned = allocate(DGX1, NodeState(DGX1), request, "n", pinned={"app": [5, 6]}).assignment
    container = pinned.containers["app"]
    assert container.gpu_indices == [5, 6]
    assert pinned.numa_nodes == [1]
    assert _numa_of_cpus(list(container.cpus)) == {1}
    assert list(container.mems) == [1]
    assert set(container.memory) == {"1"}


def test_pinned_gpus_across_numa_nodes_refuse_single_numa_node_but_fit_best_effort() -> None:
    request = pod(app(4, 2), policy=PolicyName.SINGLE_NUMA_NODE)
    with pytest.raises(UnsatisfiableError):
        allocate(DGX1, NodeState(DGX1), request, "n", pinned={"app": [3, 4]})
    relaxed = pod(app(4, 2), policy=PolicyName.BEST_EFFORT)
    assignment = allocate(DGX1, NodeState(DGX1), relaxed, "n", pinned={"app": [3, 4]}).assignment
    assert assignment.containers["app"].gpu_indices == [3, 4]


def test_a_pinned_gpu_booked_by_another_pod_is_refused_never_double_booked() -> None:
    state = busy(DGX1, gpus=(5,))
    with pytest.raises(UnsatisfiableError, match="booked by another pod"):
        allocate(DGX1, state, pod(app(2, 2)), "n", pinned={"app": [5, 6]})


@pytest.mark.parametrize(
    ("pins", "match"),
    [
        ({"app": [1]}, "asks for 2"),
        ({"app": [1, 1]}, "asks for 2"),
        ({"other": [1, 2]}, "no app container"),
        ({"app": [1, 99]}, "unknown"),
    ],
)
def test_pins_unlike_the_request_are_refused_with_a_reason(
    pins: dict[str, list[int]], match: str
) -> None:
    with pytest.raises(UnsatisfiableError, match=match):
        allocate(DGX1, NodeState(DGX1), pod(app(2, 2)), "n", pinned=pins)


def test_every_gpu_container_must_be_pinned() -> None:
    request = pod(app(2, 1, name="a"), app(2, 1, name="b"))
    with pytest.raises(UnsatisfiableError, match="not for b"):
        allocate(DGX1, NodeState(DGX1), request, "n", pinned={"a": [0]})


@pytest.mark.parametrize("scope", [Scope.POD, Scope.CONTAINER])
def test_each_container_gets_exactly_its_own_pinned_gpus(scope: Scope) -> None:
    request = pod(app(2, 2, name="a"), app(2, 1, name="b"), scope=scope)
    pins = {"a": [7, 4], "b": [0]}
    assignment = allocate(DGX1, NodeState(DGX1), request, "n", pinned=pins).assignment
    assert assignment.containers["a"].gpu_indices == [7, 4]
    assert assignment.containers["b"].gpu_indices == [0]


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True),
    held=st.lists(st.integers(0, 7), max_size=3, unique=True),
    cpus=st.integers(0, 8),
)
def test_pinned_decisions_book_the_real_gpus_or_refuse(
    gpus: list[int], held: list[int], cpus: int
) -> None:
    engine = Engine()
    state = busy(DGX1, gpus=tuple(g for g in held if g not in gpus))
    request = pod(app(cpus, len(gpus)), policy=PolicyName.BEST_EFFORT)
    decision = allocate(DGX1, state, request, "n", pinned={"app": gpus}, engine=engine)
    container = decision.assignment.containers["app"]
    assert container.gpu_indices == gpus
    state.apply("ns/p", decision.assignment)  # raises on any double booking
    assert state.free_gpus().isdisjoint(gpus)
    # CPUs sit on the pinned GPUs' NUMA nodes whenever those have room.
    gpu_numa = {g.numa for g in DGX1.gpus if g.index in gpus}
    assert _numa_of_cpus(list(container.cpus)) <= gpu_numa or cpus > 24
