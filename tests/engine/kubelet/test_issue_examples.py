"""The three disagreements with the kubelet that issue 12 named, decided as the kubelet does."""

from __future__ import annotations

import pytest
from helpers import GiB, app, pod

from numatopo_engine.allocation import allocate
from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Cpu, Gpu, NumaNode, NumatopologySpec
from numatopo_engine.state import NodeState


def node(cpus: list[int], memory: list[int], gpus: list[int]) -> NumatopologySpec:
    """NUMA node n: `cpus[n]` CPUs (CPU 0 reserved), `memory[n]` bytes, `gpus[n]` GPUs."""
    numa_nodes, rows, devices = [], [], []
    first = 0
    for n, (count, size, gpu_count) in enumerate(zip(cpus, memory, gpus, strict=True)):
        ids = list(range(first, first + count))
        first += count
        numa_nodes.append(NumaNode(id=n, cpus=CPUSet(ids), memory_bytes=size))
        rows += [Cpu(id=c, core=c, socket=n, numa=n) for c in ids]
        devices += [Gpu(index=len(devices) + i, numa=n) for i in range(gpu_count)]
    return NumatopologySpec(
        reservedCPUs=CPUSet([0]), numa_nodes=numa_nodes, cpus=rows, gpus=devices
    )


def test_restricted_refuses_when_no_mask_is_preferred_by_every_resource() -> None:
    """3 and 12 CPUs, 4 and 16 GiB, one GPU each; 6 CPUs, 9 GiB, 2 GPUs: GPUs prefer
    {0,1}, CPUs and memory {1}. No merged hint is preferred (1.24+): refused."""
    spec = node([3, 12], [4 * GiB, 16 * GiB], [1, 1])
    request = pod(app(6, 2, memory=9 * GiB), policy=PolicyName.RESTRICTED)

    with pytest.raises(UnsatisfiableError) as refused:
        allocate(spec, NodeState(spec), request, "n")
    admitted = allocate(
        spec, NodeState(spec), pod(app(6, 2, memory=9 * GiB), policy=PolicyName.BEST_EFFORT), "n"
    )

    assert refused.value.summary.startswith("restricted: no NUMA placement is preferred")
    assert [0, 1] == admitted.assignment.numa_nodes


def _single_node_memory(numa: int, size: int) -> Assignment:
    held = ContainerAssignment(mems=CPUSet([numa]), memory={str(numa): size})
    return Assignment(node="n", containers={"c": held})


def test_memory_never_spans_nodes_that_hold_single_node_memory() -> None:
    """Policy none: 13 GiB fits neither node alone (11 GiB free each), and both hold
    single-node memory of other pods, so the memory manager has no hint: refused."""
    spec = node([8, 8], [12 * GiB, 12 * GiB], [0, 0])
    state = NodeState(spec)
    state.apply("ns/a", _single_node_memory(0, GiB))
    state.apply("ns/b", _single_node_memory(1, GiB))
    empty = NodeState(spec)

    with pytest.raises(UnsatisfiableError) as refused:
        allocate(spec, state, pod(app(2, memory=13 * GiB), policy=PolicyName.NONE), "n")
    spread = allocate(spec, empty, pod(app(2, memory=13 * GiB), policy=PolicyName.NONE), "n")

    assert "memory manager" in refused.value.reason
    assert [0, 1] == sorted(spread.assignment.containers["app"].mems.ids)


def test_single_numa_node_skips_a_node_grouped_with_another() -> None:
    """NUMA 0 holds memory of a container spanning NUMA 0 and 3, NUMA 1 has no free CPU:
    a single-node placement goes to NUMA 2, never to NUMA 0."""
    spec = node([4, 4, 4, 4], [8 * GiB] * 4, [0, 0, 0, 0])
    state = NodeState(spec)
    grouped = ContainerAssignment(mems=CPUSet([0, 3]), memory={"0": GiB, "3": GiB})
    state.apply("ns/g", Assignment(node="n", containers={"c": grouped}))
    busy = ContainerAssignment(cpus=CPUSet([4, 5, 6, 7]), mems=CPUSet([1]))
    state.apply("ns/busy", Assignment(node="n", containers={"c": busy}))

    placed = allocate(spec, state, pod(app(2, memory=GiB), policy=PolicyName.SINGLE_NUMA_NODE), "n")

    assert [2] == placed.assignment.numa_nodes
