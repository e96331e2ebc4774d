"""Pinned NICs (Follow): a container the RDMA plugin gave other NICs than assigned is
decided again holding exactly those; the pod's other containers take none of them."""

from __future__ import annotations

import pytest
from helpers import app, pod
from topologies import load

from numatopo_engine.allocation import allocate
from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName, Scope
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Nic, NumatopologySpec, PathType, PciPath
from numatopo_engine.state import NodeState


def _with_nics() -> NumatopologySpec:
    """DGX-1 with one NIC per GPU, on its switch (PIX), NODE to its socket's others."""
    spec = load("dgx1-v100")
    numa = {g.index: g.numa for g in spec.gpus}
    nics = [Nic(name=f"mlx5_{g}", numa=numa[g]) for g in sorted(numa)]
    paths = [
        PciPath(gpu=g, nic=f"mlx5_{n}",
                path=PathType.PIX if g == n else PathType.NODE if numa[g] == numa[n]
                else PathType.SYS)
        for g in numa for n in numa
    ]  # fmt: skip
    return spec.model_copy(update={"nics": nics, "pci_paths": paths})


SPEC = _with_nics()


@pytest.mark.parametrize("scope", [Scope.POD, Scope.CONTAINER])
def test_pinned_nics_are_kept_and_no_other_container_takes_them(scope: Scope) -> None:
    request = pod(
        app(2, 1, nics=1, name="a"), app(2, 1, nics=1, name="b"),
        policy=PolicyName.SINGLE_NUMA_NODE, scope=scope,
    )  # fmt: skip
    unpinned = allocate(SPEC, NodeState(SPEC), request, "n").assignment
    gpus = {name: c.gpu_indices for name, c in unpinned.containers.items()}
    # Each holds the NIC beside the other's GPU: never what the engine chooses itself.
    held = {"a": [f"mlx5_{gpus['b'][0]}"], "b": [f"mlx5_{gpus['a'][0]}"]}
    assert {n: c.nics for n, c in unpinned.containers.items()} != held
    pinned = allocate(SPEC, NodeState(SPEC), request, "n", pinned=gpus, pinned_nics=held)
    assert {n: c.nics for n, c in pinned.assignment.containers.items()} == held


def test_a_container_not_pinned_takes_none_of_the_held_nics() -> None:
    request = pod(app(2, 1, nics=1, name="a"), app(2, 0, nics=1, name="b"))
    held = {"a": ["mlx5_1"]}
    decided = allocate(SPEC, NodeState(SPEC), request, "n", pinned={"a": [0]}, pinned_nics=held)
    assert decided.assignment.containers["a"].nics == ["mlx5_1"]
    assert decided.assignment.containers["b"].nics != ["mlx5_1"]
    assert decided.assignment.containers["b"].nics


def test_a_pinned_nic_booked_by_another_pod_or_of_another_count_is_refused() -> None:
    state = NodeState(SPEC)
    state.apply("ns/busy", Assignment(node="n", containers={"x": ContainerAssignment(
        nics=["mlx5_2"])}))  # fmt: skip
    request = pod(app(2, 1, nics=1))
    with pytest.raises(UnsatisfiableError, match="booked by another pod"):
        allocate(SPEC, state, request, "n", pinned={"app": [2]}, pinned_nics={"app": ["mlx5_2"]})
    with pytest.raises(UnsatisfiableError, match="asks for 1"):
        allocate(SPEC, NodeState(SPEC), request, "n", pinned_nics={"app": ["mlx5_1", "mlx5_2"]})
    with pytest.raises(UnsatisfiableError, match="unknown here"):
        allocate(SPEC, NodeState(SPEC), request, "n", pinned_nics={"app": ["mlx5_9"]})
