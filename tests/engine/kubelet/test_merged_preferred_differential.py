"""Whether the Topology Manager's merged hint is preferred, numatopo's against the kubelet's.

The memory manager reads the flag: `Allocate` refuses to extend a preferred hint whose free
memory falls short to a non-preferred one. numatopo takes it from the decision's own hints
(`decide_rows`), where memory groups forbid masks to the memory manager; the nodes are
`test_decisions_differential`'s, loaded by earlier pods, groups among them.
"""

from __future__ import annotations

import numpy as np
from helpers import GiB, app, pod
from hypothesis import given, settings
from reference import Node, Pod, decide, merge, pod_providers
from test_decisions_differential import kubelet_view, scenarios
from test_init_containers_differential import uneven_node

from numatopo_engine import NodeState, allocate
from numatopo_engine.allocation import Engine
from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.decision import decide_rows
from numatopo_engine.hints import Need
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.request import TopologyOptions


def engine_preferred(spec: NumatopologySpec, state: NodeState, asked: Pod) -> bool | None:
    """The engine's flag for one container (None: the engine refuses it)."""
    engine = Engine()
    tables = engine.tables_of(spec, state)
    need = Need(cpus=asked.cpus, memory_bytes=asked.memory, gpus=asked.gpus)
    options = TopologyOptions(policy=PolicyName(asked.policy))
    plan = engine.plan(tables, need, options, floor=state.shared_floor, closest=False)
    row = np.frombuffer(engine.row(tables, state), dtype=np.int64)[None, :]
    decided = decide_rows(plan, row, engine.gpu_memo)
    return None if decided.score[0] < 0 else bool(decided.preferred[0])


def kubelet_preferred(node: Node, asked: Pod) -> bool:
    _, preferred, _ = merge(pod_providers(node, asked), list(node.numa_ids), asked.policy)
    return preferred


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_the_merged_hints_preferred_flag_matches_the_kubelets(
    scenario: tuple[NumatopologySpec, NodeState, tuple[int, int, int, str]],
) -> None:
    spec, state, (cpus, memory, gpus, policy) = scenario
    asked = Pod(policy=policy, cpus=cpus, memory=memory, gpus=gpus)
    got = engine_preferred(spec, state, asked)
    if got is not None:
        node = kubelet_view(spec, state)
        assert got == kubelet_preferred(node, asked), (node, asked)


def test_a_mask_the_memory_groups_forbid_is_no_memory_hint() -> None:
    """Best-effort; NUMA 0-2 of 2 CPUs and 4Gi each. Pod p0 holds NUMA 1's CPUs, pod p1
    memory on NUMA 0 and 2, a memory group. For a container of 1 CPU and 1Gi the CPU hints
    prefer NUMA 0 and NUMA 2; the memory manager's are NUMA 1 (preferred) and NUMA 0,2 (the
    group rule forbids the rest). No mask is preferred by both, and the merged hint is NUMA 0,
    not preferred. numatopo's flag once ignored the group and counted NUMA 0, whose free
    memory holds 1Gi, a preferred memory hint. The memory manager books NUMA 0 either way
    (a single node joins no group)."""
    spec = uneven_node([2, 2, 2], [4, 4, 4])
    state = NodeState(spec)
    p0 = ContainerAssignment(cpus=CPUSet.parse("2-3"))
    p1 = ContainerAssignment(
        cpus=CPUSet.parse("4"), mems=CPUSet.parse("0,2"), memory={"0": GiB, "2": GiB}
    )
    state.apply("ns/p0", Assignment(node="n", containers={"app": p0}))
    state.apply("ns/p1", Assignment(node="n", containers={"app": p1}))
    asked = Pod(policy="best-effort", cpus=1, memory=GiB)
    node = kubelet_view(spec, state)

    assert decide(node, asked) == (True, 0b001)
    assert kubelet_preferred(node, asked) is False
    assert engine_preferred(spec, state, asked) is False
    placed = allocate(spec, state, pod(app(1, memory=GiB)), "n")
    assert placed.assignment.containers["app"].mems == CPUSet.parse("0")
