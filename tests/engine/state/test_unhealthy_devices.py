"""Devices the kubelet cannot hand out (`status.unhealthy`): never free, never chosen by
the engine, still bookable by a pod that already holds one."""

from __future__ import annotations

import pytest

from numatopo_engine.allocation import allocate
from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.state import NodeState


def asking(gpus: int, nics: int = 0) -> PodRequest:
    options = TopologyOptions(policy=PolicyName.BEST_EFFORT)
    return PodRequest(
        "default", "p", (ContainerRequest("main", gpus=gpus, nics=nics),), (), options
    )


def test_unhealthy_gpus_and_nics_are_not_free(node: NumatopologySpec) -> None:
    state = NodeState(node, unhealthy_gpus=[1, 9], unhealthy_nics=["mlx5_1", "eth9"])
    assert state.free_gpus() == {0, 2, 3}
    assert state.free_gpu_count() == 3
    assert state.free_nics() == {"mlx5_0"}
    assert state.unhealthy_gpus == {1}  # unknown indices and names are dropped
    assert state.free_signature().gpu_mask == 0b1101
    assert state.free_signature().nics == {"mlx5_0"}


def test_the_engine_never_chooses_an_unhealthy_gpu_or_nic(node: NumatopologySpec) -> None:
    state = NodeState(node, unhealthy_gpus=[0, 2], unhealthy_nics=["mlx5_0"])
    decision = allocate(node, state, asking(2, nics=1), "n").assignment
    assert decision.containers["main"].gpu_indices == [1, 3]
    assert decision.containers["main"].nics == ["mlx5_1"]
    state.apply("default/p", decision)
    with pytest.raises(UnsatisfiableError):
        allocate(node, state, asking(1), "n")


def test_a_pod_holding_a_gpu_that_turned_unhealthy_keeps_it(node: NumatopologySpec) -> None:
    state = NodeState(node, unhealthy_gpus=[0])
    held = Assignment(
        node="n", containers={"main": ContainerAssignment(gpus=["GPU-0"], gpu_indices=[0])}
    )
    state.apply("default/old", held)
    assert state.free_gpus() == {1, 2, 3}
    state.release("default/old")
    assert state.free_gpus() == {1, 2, 3}  # released, still not free


def test_the_free_signature_hashes_on_a_node_with_nics(node: NumatopologySpec) -> None:
    """Memos key on it (group placement's copies per node): a set inside would not hash."""
    state = NodeState(node)
    state.apply("default/p", allocate(node, state, asking(1, nics=1), "n").assignment)
    assert isinstance(state.free_nics(), frozenset)
    assert {state.free_signature(): 1}[state.copy().free_signature()] == 1
