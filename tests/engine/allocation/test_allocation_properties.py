"""Invariants of the engine over named topologies and random ones (hypothesis)."""

from __future__ import annotations

from itertools import combinations

from helpers import GiB, app, pod, small_node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from topologies import load

from numatopo_engine.allocation import allocate
from numatopo_engine.annotations import PolicyName, Scope
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState

NAMED = {name: load(name) for name in ("dgx1-v100", "h100-nvswitch", "aws-p4d", "cpu-2socket-ht")}


@st.composite
def random_nodes(draw: st.DrawFn) -> NumatopologySpec:
    numa = draw(st.integers(1, 4))
    per_numa = draw(st.integers(0, 3))
    gpus = numa * per_numa
    pairs = list(combinations(range(gpus), 2))
    linked = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    return small_node(
        numa=numa,
        cores=draw(st.integers(1, 4)),
        threads=draw(st.integers(1, 2)),
        gpus_per_numa=per_numa,
        links=[(a, b, 50.0) for a, b in linked],
    )


nodes = st.one_of(st.sampled_from(sorted(NAMED)).map(NAMED.__getitem__), random_nodes())

pods = st.builds(
    lambda cpus, gpus, memory, policy, scope, split: pod(
        *(
            [app(cpus, gpus, memory=memory * GiB)]
            if not split
            else [app(cpus, gpus, name="a"), app(cpus // 2, 0, memory=memory * GiB, name="b")]
        ),
        policy=policy,
        scope=scope,
    ),
    st.integers(0, 30),
    st.integers(0, 5),
    st.integers(0, 3),
    st.sampled_from(list(PolicyName)),
    st.sampled_from(list(Scope)),
    st.booleans(),
)


def _snapshot(state: NodeState) -> tuple[object, ...]:
    ids = [n.id for n in state.topology.numa_nodes]
    return (
        state.free_cpus(),
        state.free_gpus(),
        state.free_nics(),
        [state.free_memory(n) for n in ids],
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=nodes, requests=st.lists(pods, min_size=1, max_size=6))
def test_sequence_of_pods_keeps_every_invariant(
    spec: NumatopologySpec, requests: list[PodRequest]
) -> None:
    """No overlap, no over-capacity, policies honoured, deterministic, release restores."""
    state = NodeState(spec)
    for number, request in enumerate(requests):
        key = f"ns/p{number}"
        before = _snapshot(state)
        try:
            decision = allocate(spec, state, request, "n")
        except UnsatisfiableError:
            continue
        again = allocate(spec, state, request, "n")
        state.apply(key, decision.assignment)  # raises OverlapError on overlap/over capacity
        numa_of_gpu = {g.index: g.numa for g in spec.gpus}
        numa_of_cpu = {c.id: c.numa for c in spec.cpus}
        for container in decision.assignment.containers.values():
            used = {numa_of_cpu[c] for c in container.cpus} | {
                numa_of_gpu[g] for g in container.gpu_indices
            }
            if request.options.policy in (PolicyName.RESTRICTED, PolicyName.SINGLE_NUMA_NODE):
                # Only aligned placements are admitted; best-effort and none may be
                # topped up from outside the mask, as the kubelet's managers do.
                assert used <= set(decision.assignment.numa_nodes) | {None}
            if request.options.policy is PolicyName.SINGLE_NUMA_NODE:
                assert len(used) <= 1
        assert decision == again
        assert 0 <= decision.score <= 100
        if state.assignments and number == len(requests) - 1:
            state.release(key)
            assert before == _snapshot(state)
