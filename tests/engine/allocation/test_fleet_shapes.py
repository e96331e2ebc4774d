"""Fleets as real clusters are: every node with its own names, a few shapes shared by many.

Decisions are made on the hardware shape; a node's names (GPU and MIG UUIDs, bus ids,
NIC names) only name what was chosen, from that node's own spec. So nodes of one shape
group together whatever their names, a long-lived engine (as the operator's engine
thread keeps one, across heartbeats that re-deliver every node's spec) decides exactly
what a fresh one decides, however many shapes went through its bounded caches, and an
assignment names the devices of the node it is for.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers import GiB, app, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import pods, random_nodes
from topologies import load

from numatopo_engine.allocation import (
    Engine,
    allocate,
    evaluate,
    group_by_shape,
    mix_hosts,
    score_many,
)
from numatopo_engine.annotations import Assignment, PolicyName
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.packing import Shape, WorkloadMix
from numatopo_engine.request import ContainerRequest, PodRequest
from numatopo_engine.simulation.fleet import build_fleet, identify
from numatopo_engine.state import NodeState

MIG_NODE = Path(__file__).resolve().parents[2] / "fixtures" / "pods" / "nodes" / "dgx-a100-mig.json"
SHAPES = {
    "dgx-a100-mig": Numatopology.model_validate(json.loads(MIG_NODE.read_text())).spec,
    **{
        name: load(name)
        for name in ("dgx1-v100", "h100-nvswitch", "pcie-8gpu", "aws-p4d", "cpu-2socket-ht")
    },
}


def _decided(
    spec: NumatopologySpec, state: NodeState, request: PodRequest, engine: Engine | None
) -> Assignment | str:
    try:
        return allocate(spec, state, request, "node", engine=engine).assignment
    except UnsatisfiableError as exc:
        return exc.reason


def _score(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> int:
    try:
        return evaluate(spec, state, request)
    except UnsatisfiableError:
        return -1


def test_hundreds_of_nodes_with_their_own_uuids_make_one_group_per_shape() -> None:
    fleet = build_fleet(list(SHAPES.values()), 600, seed=3)
    uuids = [g.uuid for node in fleet for g in node.spec.gpus]
    nodes = [(node.spec, NodeState(node.spec)) for node in fleet]

    groups = group_by_shape(nodes)

    assert len(uuids) == len(set(uuids))
    assert len(SHAPES) == len(groups)
    assert [[i for i in range(600) if i % len(SHAPES) == k] for k in range(len(SHAPES))] == [
        g.positions for g in groups
    ]


def test_a_long_lived_engine_decides_as_a_fresh_one_over_heartbeats_of_a_fleet() -> None:
    """The issue's fleet: six shapes, every node re-published each heartbeat with its own
    UUIDs, partly booked; one engine for the whole run, a fresh one per decision."""
    shapes = list(SHAPES.values())
    requests = [
        pod(app(4, 2, memory=16 * GiB), policy=PolicyName.SINGLE_NUMA_NODE),
        pod(app(8, 1, memory=8 * GiB)),
        pod(app(16, 4), policy=PolicyName.RESTRICTED),
        pod(app(4, 0, memory=4 * GiB), policy=PolicyName.SINGLE_NUMA_NODE),
    ]
    engine = Engine(shapes=4)
    for beat in range(3):
        fleet = build_fleet(shapes, 60, seed=beat)
        for number, node in enumerate(fleet):
            state = NodeState(node.spec)
            for fill in requests[: (number // len(shapes)) % 3]:
                found = _decided(node.spec, state, fill, None)
                if isinstance(found, Assignment):
                    state.apply(f"ns/fill{len(state.assignments)}", found)
            for request in requests:
                assert _decided(node.spec, state, request, None) == _decided(
                    node.spec, state, request, engine
                )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=st.lists(random_nodes(), min_size=3, max_size=6),
    picks=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2**16)), min_size=4, max_size=14),
    requests=st.lists(pods, min_size=1, max_size=3),
    bound=st.integers(1, 2),
)
def test_decisions_never_depend_on_names_or_cache_history(
    shapes: list[NumatopologySpec],
    picks: list[tuple[int, int]],
    requests: list[PodRequest],
    bound: int,
) -> None:
    """Random nodes of random shapes (more than the engine's shape bound), each with its
    own names; a request on one of them from the one long-lived engine equals that of a
    fresh engine, and the assignment names the node's own devices."""
    engine = Engine(shapes=bound)
    for number, (which, seed) in enumerate(picks):
        spec = identify(shapes[which % len(shapes)], f"n{number}", seed=seed, nic_names=True)
        state = NodeState(spec)
        names = {g.index: g.uuid for g in spec.gpus}
        for request in requests:
            expected = _decided(spec, state, request, None)
            assert expected == _decided(spec, state, request, engine)
            if isinstance(expected, Assignment):
                for container in expected.containers.values():
                    assert [names[g] for g in container.gpu_indices] == container.gpus
                state.apply(f"ns/p{number}-{len(state.assignments)}", expected)
        groups = group_by_shape([(spec, state)])
        scored = score_many(groups[0].topology, groups[0].states, requests[0], engine=engine)
        fresh = score_many(spec, [state], requests[0])
        assert fresh.scores.tolist() == scored.scores.tolist()
        assert fresh.rank.tolist() == scored.rank.tolist()


def test_assignments_name_the_gpus_mig_devices_and_nics_of_their_own_node() -> None:
    """Two nodes of one shape, named apart (NICs too): the same choice, each node's names."""
    shape = SHAPES["aws-p4d"]
    first, second = (identify(shape, name, nic_names=True) for name in ("a", "b"))
    request = pod(app(8, 2, nics=1), policy=PolicyName.SINGLE_NUMA_NODE)
    engine = Engine()

    one = allocate(first, NodeState(first), request, "a", engine=engine).assignment
    two = allocate(second, NodeState(second), request, "b", engine=engine).assignment

    (c1,), (c2,) = one.containers.values(), two.containers.values()
    assert c1.gpu_indices == c2.gpu_indices
    assert [g.uuid for i in c1.gpu_indices for g in first.gpus if g.index == i] == c1.gpus
    assert [g.uuid for i in c2.gpu_indices for g in second.gpus if g.index == i] == c2.gpus
    first_nics = sorted(n.name for n in first.nics)
    second_nics = sorted(n.name for n in second.nics)
    assert [second_nics[first_nics.index(n)] for n in c1.nics] == c2.nics
    assert set(c2.nics) <= set(second_nics)
    mig = SHAPES["dgx-a100-mig"]
    third = identify(mig, "c")
    resource = next(m.resource for g in third.gpus for m in g.mig_devices or ())
    mig_request = PodRequest(
        "ns", "m", (ContainerRequest(name="m", cpu_milli=2000, gpus=1, gpu_resource=resource),)
    )
    placed = allocate(third, NodeState(third), mig_request, "c", engine=engine).assignment
    (c3,) = placed.containers.values()
    uuids = {m.index: m.uuid for g in third.gpus for m in g.mig_devices or ()}
    assert [uuids[i] for i in c3.mig_indices] == c3.mig
    assert c3.mig


def test_kept_row_verdicts_answer_as_a_fresh_engine_as_nodes_change() -> None:
    """The verdicts a long-lived engine keeps per node row (`RowVerdicts`, bounded to a
    few rows here so they are dropped and rebuilt too): over rounds where pods land on
    a fleet and the nodes judged together change (so do the rank's `Hosts` weights),
    every score, rank, refusal summary and refusal detail equals a fresh engine's."""
    shapes = list(SHAPES.values())
    fleet = build_fleet(shapes, 90, seed=5)
    states = [NodeState(node.spec) for node in fleet]
    requests = [
        pod(app(4, 1, memory=16 * GiB)),
        pod(app(8, 2, memory=32 * GiB), policy=PolicyName.SINGLE_NUMA_NODE),
        pod(app(16, 4), policy=PolicyName.RESTRICTED),
        pod(app(48, 0, memory=64 * GiB)),
    ]
    mix = WorkloadMix.of({Shape.of(1, 4): 3.0, Shape.of(4, 16): 1.0, Shape.of(8, 32): 1.0})
    engine = Engine(rows=40)
    kept_hits = 0
    for beat in range(6):
        judged = [(fleet[i].spec, states[i]) for i in range(beat % 3, len(fleet), 1 + beat % 2)]
        groups = group_by_shape(judged)
        for request in requests:
            for with_mix in (None, mix):
                fresh_engine = Engine()
                hosts = mix_hosts(((g.topology, g.states) for g in groups), mix)
                for group in groups:
                    kept_before = sum(len(v) for v in engine.verdicts.values())
                    kept = score_many(group.topology, group.states, request, engine=engine,
                                      mix=with_mix, hosts=hosts)  # fmt: skip
                    kept_hits += kept_before == sum(len(v) for v in engine.verdicts.values())
                    fresh = score_many(group.topology, group.states, request,
                                       engine=fresh_engine, mix=with_mix, hosts=hosts)  # fmt: skip
                    assert fresh.scores.tolist() == kept.scores.tolist()
                    # The one-node path reads the node's bookings, not a kept row.
                    assert [_score(group.topology, s, request) for s in group.states] == (
                        kept.scores.tolist()
                    )
                    assert fresh.rank.tolist() == kept.rank.tolist()
                    assert [(ix.tolist(), text) for ix, text in fresh.refused] == [
                        (ix.tolist(), text) for ix, text in kept.refused
                    ]
                    for ix, _ in fresh.refused:
                        for index in ix.tolist():
                            assert fresh.refusal(index).reason == kept.refusal(index).reason
                assert sum(len(v) for v in engine.verdicts.values()) <= 40
        # Pods land: some rows change, the others stay as they were.
        for number in range(beat, len(fleet), 4):
            found = _decided(fleet[number].spec, states[number], requests[beat % 2], None)
            if isinstance(found, Assignment):
                states[number].apply(f"ns/land{beat}-{number}", found)
    assert kept_hits > 0
