"""numatopo's full decision for a Guaranteed container against `reference.decide`.

Random small nodes (1-4 NUMA nodes of 2-8 single-thread CPUs, 0-2 GPUs per node and
sometimes one without a NUMA node, 1-16 GiB per node, CPU 0 reserved as the kubelet's
static CPU manager requires) are first loaded by earlier pods placed with the engine
itself, so exclusive CPUs, taken GPUs and memory groups (cross-NUMA memory) arise. The
reference reads that state the way the kubelet's managers would, then both decide one
more pod: admission must agree, and so must the NUMA nodes of an admitted placement.
"""

from __future__ import annotations

from helpers import app, pod
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import POLICIES, Node, Pod, bits_of, decide

from numatopo_engine import NodeState, allocate
from numatopo_engine.annotations import PolicyName
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Cpu, Gpu, NumaNode, NumatopologySpec
from numatopo_engine.quantity import page_bytes

GiB = 2**30


@st.composite
def specs(draw: st.DrawFn) -> NumatopologySpec:
    n = draw(st.integers(1, 4))
    cpus_per = [draw(st.integers(2, 8)) for _ in range(n)]
    mem_per = [draw(st.integers(1, 16)) * GiB for _ in range(n)]
    cpus: list[Cpu] = []
    nodes: list[NumaNode] = []
    next_id = 0
    for numa in range(n):
        ids = list(range(next_id, next_id + cpus_per[numa]))
        next_id += cpus_per[numa]
        cpus += [Cpu(id=c, core=c, socket=numa, numa=numa) for c in ids]
        nodes.append(
            NumaNode(
                id=numa,
                cpus=CPUSet(ids),
                memory_bytes=mem_per[numa],
                distances={str(m): 10 if m == numa else 20 for m in range(n)},
            )
        )
    gpu_numas: list[int | None] = []
    for numa in range(n):
        gpu_numas += [numa] * draw(st.integers(0, 2))
    if draw(st.booleans()) and draw(st.booleans()):
        gpu_numas.append(None)
    gpus = [Gpu(index=i, numa=g) for i, g in enumerate(gpu_numas)]
    return NumatopologySpec(reserved_cpus=CPUSet([0]), numa_nodes=nodes, cpus=cpus, gpus=gpus)


def requests(max_cpus: int, max_memory: int) -> st.SearchStrategy[tuple[int, int, int, str]]:
    return st.tuples(
        st.integers(1, max_cpus),
        st.integers(1, max_memory // GiB + 1).map(lambda g: g * GiB // 2),
        st.integers(0, 3),
        st.sampled_from(POLICIES),
    )


def kubelet_view(spec: NumatopologySpec, state: NodeState) -> Node:
    """The machine state the kubelet's CPU, device and memory managers would hold (memory
    and huge pages as the memory manager's types "memory" and "hugepages-<size>")."""
    numa_ids = tuple(n.id for n in spec.numa_nodes)
    numa_of_cpu = {c.id: c.numa for c in spec.cpus}
    exclusive: set[int] = set()
    taken_gpus: set[int] = set()
    sizes = sorted({size for n in spec.numa_nodes for size in n.hugepages})
    allocatable = {"memory": {n.id: n.memory_bytes for n in spec.numa_nodes}}
    for size in sizes:
        allocatable[f"hugepages-{size}"] = {
            n.id: n.hugepages.get(size, 0) * page_bytes(size) for n in spec.numa_nodes
        }
    used = {kind: dict.fromkeys(numa_ids, 0) for kind in allocatable}
    groups: dict[int, tuple[int, ...]] = {}
    assignments = dict.fromkeys(numa_ids, 0)
    for assignment in state.assignments.values():
        for container in assignment.containers.values():
            if container.exclusive:
                exclusive |= set(container.cpus.ids)
            taken_gpus |= set(container.gpu_indices)
            for numa, size in container.memory.items():
                used["memory"][int(numa)] += size
            for numa, pages in container.hugepages.items():
                for page, size in pages.items():
                    used[f"hugepages-{page}"][int(numa)] += size
            if container.memory or container.hugepages:
                group = tuple(sorted(container.mems.ids))
                for numa in group:
                    assignments[numa] += 1
                    groups[numa] = group
    reserved = set(spec.reserved_cpus.ids)
    all_cpus = dict.fromkeys(numa_ids, 0)
    available = dict.fromkeys(numa_ids, 0)
    for cpu, numa in numa_of_cpu.items():
        all_cpus[numa] += 1
        if cpu not in reserved and cpu not in exclusive:
            available[numa] += 1
    return Node(
        numa_ids=numa_ids,
        cpus_per_numa=all_cpus,
        available_cpus_per_numa=available,
        gpus=tuple(g.numa for g in spec.gpus),
        gpu_available=tuple(g.index not in taken_gpus for g in spec.gpus),
        allocatable=allocatable,
        free={
            kind: {n: per_numa[n] - used[kind][n] for n in numa_ids}
            for kind, per_numa in allocatable.items()
        },
        groups=groups,
        assignments=assignments,
    )


def totals(spec: NumatopologySpec) -> tuple[int, int]:
    """The node's CPUs and memory bytes."""
    return len(spec.cpus), sum(n.memory_bytes for n in spec.numa_nodes)


@st.composite
def booked_nodes(draw: st.DrawFn, most_pods: int = 4) -> tuple[NumatopologySpec, NodeState]:
    """A node holding up to `most_pods` pods as the engine placed them (those that fit)."""
    spec = draw(specs())
    state = NodeState(spec)
    for i in range(draw(st.integers(0, most_pods))):
        cpus, memory, gpus, policy = draw(requests(*totals(spec)))
        request = pod(app(cpus, gpus, memory=memory), policy=PolicyName(policy), name=f"p{i}")
        try:
            decision = allocate(spec, state, request, "n")
        except UnsatisfiableError:
            continue
        state.apply(f"ns/p{i}", decision.assignment)
    return spec, state


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[NumatopologySpec, NodeState, tuple[int, int, int, str]]:
    spec, state = draw(booked_nodes())
    return spec, state, draw(requests(*totals(spec)))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_engine_decision_matches_reference(
    scenario: tuple[NumatopologySpec, NodeState, tuple[int, int, int, str]],
) -> None:
    spec, state, (cpus, memory, gpus, policy) = scenario
    node = kubelet_view(spec, state)
    admit, mask = decide(node, Pod(policy=policy, cpus=cpus, memory=memory, gpus=gpus))
    request = pod(app(cpus, gpus, memory=memory), policy=PolicyName(policy), name="last")
    try:
        decision = allocate(spec, state, request, "n")
    except UnsatisfiableError:
        engine_admit = False
    else:
        engine_admit = True
    assert engine_admit == admit, (node, mask)
    if admit and policy != "none" and mask is not None:
        assert set(decision.assignment.numa_nodes) == set(bits_of(mask))
