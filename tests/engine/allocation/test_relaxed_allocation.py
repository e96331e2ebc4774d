"""`allocate_around`: a pod holding GPUs keeps its policy where it can hold around them,
is placed best-effort around them (with the reason) where it cannot, and is refused
where nothing fits or there is nothing to relax."""

from __future__ import annotations

import pytest
from helpers import app, busy, pod
from topologies import load

from numatopo_engine.allocation import Engine, allocate
from numatopo_engine.annotations import PolicyName
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.relaxed_allocation import allocate_around
from numatopo_engine.state import NodeState

DGX1 = load("dgx1-v100")  # GPUs 0-3 on NUMA 0, 4-7 on NUMA 1


def around(request, pinned, state=None):  # type: ignore[no-untyped-def]
    return allocate_around(
        DGX1, state or NodeState(DGX1), request, "n", engine=Engine(), pinned=pinned
    )


def test_a_policy_that_holds_around_the_pins_is_kept() -> None:
    request = pod(app(4, 2), policy=PolicyName.SINGLE_NUMA_NODE)
    assignment, why = around(request, {"app": [5, 6]})
    assert why == ""
    assert assignment.policy == PolicyName.SINGLE_NUMA_NODE
    assert (
        assignment
        == allocate(DGX1, NodeState(DGX1), request, "n", pinned={"app": [5, 6]}).assignment
    )


def test_pins_on_two_numa_nodes_relax_single_numa_node_to_best_effort_with_the_reason() -> None:
    request = pod(app(4, 2), policy=PolicyName.SINGLE_NUMA_NODE)
    with pytest.raises(UnsatisfiableError) as refused:
        allocate(DGX1, NodeState(DGX1), request, "n", pinned={"app": [3, 4]})

    assignment, why = around(request, {"app": [3, 4]})

    assert why == refused.value.reason
    assert assignment.policy == PolicyName.BEST_EFFORT
    assert assignment.containers["app"].gpu_indices == [3, 4]


def test_without_pins_nothing_is_relaxed() -> None:
    """More CPUs than one NUMA node has: best-effort would place it, the policy does not."""
    cpus = len(DGX1.cpus) // 2 + 4
    best_effort = pod(app(cpus, 0), policy=PolicyName.BEST_EFFORT)
    allocate(DGX1, NodeState(DGX1), best_effort, "n")
    with pytest.raises(UnsatisfiableError):
        around(pod(app(cpus, 0), policy=PolicyName.SINGLE_NUMA_NODE), {})


def test_a_pinned_gpu_another_pod_holds_is_refused_even_relaxed() -> None:
    request = pod(app(2, 2), policy=PolicyName.SINGLE_NUMA_NODE)
    with pytest.raises(UnsatisfiableError, match="booked by another pod"):
        around(request, {"app": [3, 4]}, busy(DGX1, gpus=(4,)))
