"""The engine on every real machine we have: fill the node with random pods, then empty it.

Each source is read by the real reader and passed through `inspect -o json` (see
`real_sources`). Hypothesis draws pods (any policy, scope and CPU mode; GPUs, memory,
huge pages and NICs where the node has them) and places them one after another until
three in a row are refused or the node is full; then releases them in a random order.
After every step the invariants of `placement_checks` hold.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_checks import (
    allocatable,
    check_capacity,
    check_gets_what_it_asked,
    check_local,
    check_restricted,
    check_shared_cpus_free,
    check_single_numa,
    check_within_node,
)
from pod_manifests import pod_manifests
from real_sources import NVML_HOST_TREE, SOURCE_IDS, SOURCES, offline_cpus

from numatopo_engine.allocation import allocate, evaluate
from numatopo_engine.annotations import PolicyName
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.pod_request import request_from_pod
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.state import NodeState

from .conftest import PROFILE

MAX_PODS = 24
REFUSALS_TO_CALL_FULL = 3


def _free(state: NodeState) -> tuple[object, ...]:
    ids = [node.id for node in state.topology.numa_nodes]
    sizes = sorted({size for node in state.topology.numa_nodes for size in node.hugepages})
    return (
        state.free_cpus(),
        state.free_gpus(),
        state.free_nics(),
        [state.free_memory(n) for n in ids],
        [state.free_hugepages(n, size) for n in ids for size in sizes],
    )


def _held_cpus(state: NodeState) -> frozenset[int]:
    return frozenset(allocatable(state.topology) - state.free_cpus().ids)


def place_checked(spec: NumatopologySpec, state: NodeState, request: PodRequest, node: str) -> bool:
    """Place `request` if it fits, checking every invariant; False when it is refused."""
    try:
        decision = allocate(spec, state, request, node)
    except UnsatisfiableError as refusal:
        reason: str | None = refusal.reason
    else:
        reason = None
    if reason is not None:
        with pytest.raises(UnsatisfiableError) as also:
            evaluate(spec, state, request)
        assert reason == also.value.reason, "evaluate and allocate refuse differently"
        return False
    assignment = decision.assignment
    assert decision.score == evaluate(spec, state, request)
    assert decision == allocate(spec, state.copy(), request, node), "not deterministic"
    check_within_node(spec, assignment)
    check_local(spec, request, assignment)
    check_gets_what_it_asked(request, assignment)
    check_shared_cpus_free(assignment, _held_cpus(state))
    check_single_numa(request, assignment)
    check_restricted(spec, request, assignment, list(state.assignments.values()))
    state.apply(request.key, assignment)  # OverlapError here is an engine bug
    check_capacity(spec, state.assignments.values())
    return True


@pytest.mark.parametrize("source_id", SOURCE_IDS)
@settings(settings.get_profile(PROFILE))
@given(data=st.data())
def test_fill_then_empty_a_real_node(
    real_topology: Callable[[str], Numatopology], source_id: str, data: st.DataObject
) -> None:
    """Pods placed until the node is full never overlap, over-book or break a policy."""
    topology = real_topology(source_id)
    spec = topology.spec
    state = NodeState(spec)
    placed: list[str] = []
    refused_in_a_row = 0
    for number in range(MAX_PODS):
        manifest = data.draw(pod_manifests(spec, f"p{number}"), label=f"pod {number}")
        request = request_from_pod(manifest)
        if place_checked(spec, state, request, topology.metadata.name):
            placed.append(request.key)
            refused_in_a_row = 0
        else:
            refused_in_a_row += 1
            if refused_in_a_row == REFUSALS_TO_CALL_FULL:
                break

    for key in data.draw(st.permutations(placed), label="release order"):
        state.release(key)
        rebuilt, rejected = NodeState.rebuild(spec, state.assignments.items())
        assert ([], _free(rebuilt)) == (rejected, _free(state))

    assert _free(NodeState(spec)) == _free(state)


def rename(state: NodeState, old: str, new: str) -> None:
    """Keep what pod `old` holds under `new`, so the next pod can be called `old` again."""
    held = state.release(old)
    assert held is not None
    state.apply(new, held)


def _cpu_pod(cpus: int, policy: PolicyName, gpus: int = 0) -> PodRequest:
    container = ContainerRequest(name="c", cpu_milli=cpus * 1000, gpus=gpus)
    return PodRequest("it", "p", (container,), options=TopologyOptions(policy=policy))


@pytest.mark.parametrize(
    "source_id",
    [
        pytest.param("sysfs:16em64t-4s2c2t-offlines", id="hwloc-offlines"),
        pytest.param("sysfs:linux-amd64-offlineCPUs", id="ghw-offline-cpus"),
    ],
)
def test_a_node_full_of_pods_never_holds_an_offline_cpu(
    real_topology: Callable[[str], Numatopology], source_id: str
) -> None:
    """One-CPU pods until nothing fits: they hold every online CPU but the one the shared
    pool keeps (the nodes reserve none), never an offline one."""
    spec = real_topology(source_id).spec
    state = NodeState(spec)
    number = 0
    while place_checked(spec, state, _cpu_pod(1, PolicyName.BEST_EFFORT), "n"):
        rename(state, "it/p", f"it/p{number}")
        number += 1
    held = set().union(
        *(c.cpus.ids for a in state.assignments.values() for c in a.containers.values())
    )

    shared = set(spec.online_cpus().ids) - held

    assert not spec.reserved_cpus
    assert (1, set()) == (len(shared), held & offline_cpus(spec))
    assert offline_cpus(spec)


@pytest.mark.parametrize(
    "source_id",
    [
        pytest.param("kubelet:h100-sxm-8gpu-nvswitch_stas00_ht", id="h100-topo-reserved-0,104"),
        pytest.param("kubelet:256ppc-8n8s4t", id="power8-sysfs-reserved-0,104"),
    ],
)
def test_a_node_full_of_pods_never_holds_a_reserved_cpu(
    real_topology: Callable[[str], Numatopology], source_id: str
) -> None:
    """Eight-CPU pods until nothing fits: the kubelet's reservedSystemCPUs stay untouched."""
    spec = real_topology(source_id).spec
    state = NodeState(spec)
    number = 0
    while place_checked(spec, state, _cpu_pod(8, PolicyName.SINGLE_NUMA_NODE), "n"):
        rename(state, "it/p", f"it/p{number}")
        number += 1
    held = set().union(
        *(c.cpus.ids for a in state.assignments.values() for c in a.containers.values())
    )

    assert ({0, 104}, set()) == (set(spec.reserved_cpus.ids), held & {0, 104})
    assert len(spec.online_cpus()) - 2 - len(held) < 8 * len(spec.numa_nodes)


@pytest.mark.parametrize("policy", [PolicyName.BEST_EFFORT, PolicyName.NONE])
@pytest.mark.parametrize(
    "source_id", [s for s in SOURCE_IDS if SOURCES[s].nvml and SOURCES[s].tree == NVML_HOST_TREE]
)
def test_gpus_of_unknown_numa_are_all_assignable(
    real_topology: Callable[[str], Numatopology], source_id: str, policy: PolicyName
) -> None:
    """NVML on x86 does not say where a GPU is: every GPU is still handed out, one by one."""
    spec = real_topology(source_id).spec
    state = NodeState(spec)
    for number in range(len(spec.gpus)):
        request = _cpu_pod(1, policy, gpus=1)
        assert place_checked(spec, state, request, "n"), f"GPU number {number + 1} refused"
        rename(state, "it/p", f"it/p{number}")
    held = sorted(
        g for a in state.assignments.values() for c in a.containers.values() for g in c.gpu_indices
    )

    assert ([None] * len(spec.gpus), list(range(len(spec.gpus)))) == (
        [gpu.numa for gpu in spec.gpus],
        held,
    )
