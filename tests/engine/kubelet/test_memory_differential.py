"""The static memory manager's NUMA nodes under `none` and `best-effort`, numatopo's
against the kubelet's.

Under `none` the memory manager gets no Topology Manager hint and takes its own best
hint (`getDefaultHint`); under `best-effort` it gets the merged hint, preferred or not,
and extends it to its best own hint containing it when the hint's free memory does not
hold the request (`extendTopologyManagerHint`). Both refuse where the kubelet refuses
("failed to find NUMA nodes to extend the current topology hint", "failed to get the
default NUMA affinity"), and an admitted container's `cpuset.mems` is the nodes the
memory manager chose, wherever the CPUs and GPUs went. Scope `pod`, one to three app
containers (the memory manager allocates each in turn with the pod's hint), on the
partly booked small nodes of `test_decisions_differential`.
"""

from __future__ import annotations

from helpers import GiB, app, pod
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import Container, bits_of, pod_memory
from test_decisions_differential import booked_nodes, kubelet_view, totals

from numatopo_engine import NodeState, allocate, evaluate
from numatopo_engine.allocation import evaluate_many
from numatopo_engine.annotations import PolicyName, Scope
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import NumatopologySpec

POLICIES = ("none", "best-effort")


@st.composite
def scenarios(draw: st.DrawFn):
    spec, state = draw(booked_nodes())
    total_cpus, total_memory = totals(spec)
    containers = [
        Container(
            name=f"app{i}",
            cpus=draw(st.integers(1, max(1, total_cpus // 2))),
            memory=draw(st.integers(1, total_memory // GiB + 1)) * GiB // 2,
            gpus=draw(st.integers(0, 2)),
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    return spec, state, containers, draw(st.sampled_from(POLICIES))


def engine_request(containers: list[Container], policy: str):
    return pod(
        *(app(c.cpus, c.gpus, memory=c.memory, name=c.name) for c in containers),
        policy=PolicyName(policy), scope=Scope.POD, name="last",
    )  # fmt: skip


def check(spec: NumatopologySpec, state: NodeState, containers: list[Container], policy) -> None:
    node = kubelet_view(spec, state)
    admit, wanted = pod_memory(node, containers, policy)
    request = engine_request(containers, policy)
    try:
        evaluate(spec, state, request)
    except UnsatisfiableError:
        scored_admit = False
    else:
        scored_admit = True
    try:
        decision = allocate(spec, state, request, "n")
    except UnsatisfiableError as refused:
        engine_admit, why = False, str(refused)
    else:
        engine_admit, why = True, ""
    assert engine_admit == admit, (node, containers, wanted, why)
    assert scored_admit == admit, (node, containers, wanted)
    bulk = evaluate_many(spec, [state], request)[0]
    assert isinstance(bulk, int) == admit, (node, containers, wanted, bulk)
    if admit:
        for c in containers:
            placed = decision.assignment.containers[c.name]
            mems = placed.mems.ids
            assert sorted(mems) == bits_of(wanted[c.name]), (node, containers, wanted, mems)
            assert {int(n) for n in placed.memory} <= set(bits_of(wanted[c.name]))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_memory_nodes_match_the_kubelets(scenario) -> None:
    check(*scenario)
