"""`evaluate_many` answers, node by node, exactly what `evaluate` answers."""

from __future__ import annotations

import pytest
from helpers import GiB, app, busy, pod, small_node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from score_oracle import compose_score
from test_allocation_properties import NAMED
from test_evaluate_matches_allocate import BENCH_MIX, filled_states, fills, requests, varied_nodes
from topologies import load

from numatopo_engine.allocation import (
    allocate,
    evaluate,
    evaluate_many,
    group_by_shape,
    score_many,
)
from numatopo_engine.annotations import PolicyName
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import InvalidRequestError, UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.refusals import Refusal
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState

Answer = int | tuple[str, str]
SHAPES = {**NAMED, **{name: load(name) for name in ("pcie-8gpu", "gb200-like")}}


def _one_by_one(spec: NumatopologySpec, states: list[NodeState], probe: PodRequest) -> list[Answer]:
    answers: list[Answer] = []
    for state in states:
        try:
            answers.append(evaluate(spec, state, probe))
        except UnsatisfiableError as exc:
            answers.append((exc.summary, exc.reason))
    return answers


def _in_bulk(spec: NumatopologySpec, states: list[NodeState], probe: PodRequest) -> list[Answer]:
    return [
        (o.summary, o.reason) if isinstance(o, Refusal) else o
        for o in evaluate_many(spec, states, probe)
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.one_of(st.sampled_from(sorted(SHAPES)).map(SHAPES.__getitem__), varied_nodes()),
    helds=st.lists(st.sets(st.integers(0, 63), max_size=6), min_size=1, max_size=3),
    placed=fills,
    probes=st.lists(requests, min_size=1, max_size=3),
)
def test_bulk_answers_what_evaluate_answers_node_by_node(
    spec: NumatopologySpec,
    helds: list[set[int]],
    placed: list[PodRequest],
    probes: list[PodRequest],
) -> None:
    """Score, or refusal summary and detailed text, over every state nodes pass through."""
    states = [state for held in helds for state in filled_states(spec, held, placed)]
    for probe in probes:
        try:
            expected = _one_by_one(spec, states, probe)
        except InvalidRequestError:
            with pytest.raises(InvalidRequestError):
                evaluate_many(spec, states, probe)
            continue

        actual = _in_bulk(spec, states, probe)

        assert expected == actual


def _cluster(shape: str) -> list[NodeState]:
    """Nodes of one shape, each with its own spec object, at assorted occupancy."""
    states = []
    for number in range(12):
        spec = load(shape)
        gpus = tuple(range(number % 5)) if spec.gpus else ()
        states.append(busy(spec, gpus=gpus, cpus=f"0-{number * 2}" if number else ""))
    return states


@pytest.mark.parametrize("request_", BENCH_MIX[:4])
def test_a_cluster_grouped_by_shape_is_answered_as_evaluate_answers(
    request_: PodRequest,
) -> None:
    """The scheduler's usual pods over a mixed cluster, as the extender asks: nodes
    grouped by hardware shape once, each group decided in bulk without the shape check,
    the answers put back in node order."""
    nodes = [(state.topology, state) for shape in SHAPES for state in _cluster(shape)[::3]]
    expected = [_one_by_one(spec, [state], request_)[0] for spec, state in nodes]
    actual: list[Answer | None] = [None] * len(nodes)

    for group in group_by_shape(nodes):
        answers = _in_bulk_unchecked(group.topology, group.states, request_)
        for position, answer in zip(group.positions, answers, strict=True):
            actual[position] = answer

    assert expected == actual


def _in_bulk_unchecked(
    spec: NumatopologySpec, states: list[NodeState], probe: PodRequest
) -> list[Answer]:
    return [
        (o.summary, o.reason) if isinstance(o, Refusal) else o
        for o in evaluate_many(spec, states, probe, checked=False)
    ]


def _from_arrays(
    spec: NumatopologySpec, states: list[NodeState], probe: PodRequest
) -> list[Answer]:
    scored = score_many(spec, states, probe)
    answers: list[Answer] = [int(score) for score in scored.scores]
    for where, text in scored.refused:
        for index in where.tolist():
            refusal = scored.refusal(index)
            answers[index] = (text, refusal.reason)
    return answers


@pytest.mark.parametrize("shape", ["dgx1-v100", "h100-nvswitch", "pcie-8gpu", "cpu-2socket-ht"])
@pytest.mark.parametrize("request_", BENCH_MIX)
def test_scores_as_arrays_answer_what_evaluate_answers(shape: str, request_: PodRequest) -> None:
    """`score_many`'s scores, refused pairs and refusals, in bulk or node by node."""
    states = _cluster(shape)
    expected = _one_by_one(states[0].topology, states, request_)

    actual = _from_arrays(states[0].topology, states, request_)

    assert expected == actual


def test_bulk_refusals_come_as_one_pair_with_each_nodes_detail_on_request() -> None:
    """A scheduler sends the summary of thousands of refused nodes as one (indices,
    summary) pair; a node's detailed text is there when asked for, as `evaluate` words it."""
    states = _cluster("h100-nvswitch")
    request = BENCH_MIX[2].values[0]  # 8 GPUs
    assert isinstance(request, PodRequest)
    scored = score_many(states[0].topology, states, request)
    summary = "best-effort: 8 GPUs requested, more than the node has free"
    refused = [1, 2, 3, 4, 6, 7, 8, 9, 11]
    expected = ([(refused, summary)], _one_by_one(states[0].topology, states, request))

    actual = (
        [(where.tolist(), text) for where, text in scored.refused],
        [
            (summary, scored.refusal(i).reason) if i in refused else int(score)
            for i, score in enumerate(scored.scores.tolist())
        ],
    )

    assert expected == actual


def test_a_refusal_read_after_the_node_changed_words_the_node_as_it_was() -> None:
    """The summary is there at once; the per-NUMA text, worded when first read, describes
    the free amounts the node had when it was decided, not what it has by then."""
    spec = NAMED["h100-nvswitch"]
    state = busy(spec, gpus=(0, 5))
    big = pod(app(4, 4), policy=PolicyName.SINGLE_NUMA_NODE)
    [refusal] = evaluate_many(spec, [state], big)
    assert isinstance(refusal, Refusal)
    expected = (
        "single-numa-node: no NUMA node has 4 CPUs and 4 GPUs free",
        "single-numa-node: no NUMA node has 4 CPUs and 4 GPUs free "
        "(NUMA 0: 104 CPUs, 3 GPUs free; NUMA 1: 104 CPUs, 3 GPUs free)",
        86,  # the same pod fits the node once it is free
    )
    summary_at_once = refusal.summary
    state.release("ns/busy")

    actual = (summary_at_once, str(refusal), evaluate(spec, state, big))

    assert expected == actual


def test_nodes_of_one_shape_group_together_whatever_their_spec_objects() -> None:
    names = ("dgx1-v100", "pcie-8gpu", "dgx1-v100", "dgx1-v100", "pcie-8gpu")
    nodes = [(spec, NodeState(spec)) for spec in map(load, names)]
    expected = [
        (nodes[0][0], [0, 2, 3], [nodes[i][1] for i in (0, 2, 3)]),
        (nodes[1][0], [1, 4], [nodes[i][1] for i in (1, 4)]),
    ]

    actual = [tuple(group) for group in group_by_shape(nodes)]

    assert expected == actual


def test_a_state_of_another_shape_is_refused_with_a_message() -> None:
    with pytest.raises(ValueError, match="hardware"):
        evaluate_many(load("dgx1-v100"), [NodeState(load("pcie-8gpu"))], pod(app(1)))


def _row_node(*, numa: int, cores: int, gpus_per_numa: int) -> NumatopologySpec:
    return small_node(numa=numa, cores=cores, threads=1, gpus_per_numa=gpus_per_numa, links=[])


# Nodes whose score's weighted sum lands on .5 exactly or near it, with and without GPUs:
# (node, CPUs held, GPUs held, CPUs asked, GPUs asked, the score's terms).
ROUNDING_CASES = [
    pytest.param(
        _row_node(numa=1, cores=80, gpus_per_numa=0), "", (), 1, 0, (1.0, 1.0, [1 / 80], False),
        id="cpu-pack-of-sixty-point-five-rounds-to-even",
    ),
    pytest.param(
        _row_node(numa=1, cores=80, gpus_per_numa=0), "", (), 3, 0, (1.0, 1.0, [3 / 80], False),
        id="cpu-pack-of-sixty-one-point-five-rounds-up",
    ),
    pytest.param(
        _row_node(numa=2, cores=5, gpus_per_numa=2), "", (0, 2), 7, 2,
        (1.0, 1.0, [1.0, 7 / 10], True),
        id="gpus-and-cpus-over-two-numa-nodes-ninety-five-point-five-rounds-to-even",
    ),
    pytest.param(
        _row_node(numa=2, cores=3, gpus_per_numa=3), "0", (0,), 2, 1,
        (1.0, 1.0, [2 / 3, 3 / 3], True),
        id="gpu-and-cpu-thirds-averaged",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "cpus_held", "gpus_held", "cpus", "gpus", "terms"), ROUNDING_CASES
)
def test_scores_round_alike_in_bulk_and_one_by_one(
    *,
    spec: NumatopologySpec,
    cpus_held: str,
    gpus_held: tuple[int, ...],
    cpus: int,
    gpus: int,
    terms: tuple[float, float, list[float], bool],
) -> None:
    """Same float operations in the same order, and half to even like `round`: the
    score `score_oracle.compose_score` gives these terms, whichever way the node is decided."""
    state = busy(spec, gpus=gpus_held, cpus=cpus_held)
    request = pod(app(cpus, gpus))
    span, links, fills, with_gpus = terms
    expected = compose_score(span, links, fills, with_gpus=with_gpus)

    actual = [
        allocate(spec, state, request, "n").score,
        evaluate(spec, state, request),
        *evaluate_many(spec, [state, state.copy()], request),
    ]

    assert [expected] * 4 == actual


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    numa=st.integers(1, 2),
    cores=st.integers(1, 96),
    gpus_per_numa=st.integers(0, 4),
    held=st.data(),
    cpus=st.integers(0, 12),
    gpus=st.integers(0, 4),
)
def test_bulk_scores_equal_evaluate_for_any_fill(
    *, numa: int, cores: int, gpus_per_numa: int, held: st.DataObject, cpus: int, gpus: int
) -> None:
    """Fills of every fraction a node of up to 192 CPUs and 8 GPUs allows: the array
    arithmetic of the bulk path rounds each score as `evaluate` does."""
    spec = _row_node(numa=numa, cores=cores, gpus_per_numa=gpus_per_numa)
    every_cpu = sorted(spec.online_cpus().ids)
    held_cpus = held.draw(st.sets(st.sampled_from(every_cpu), max_size=len(every_cpu) // 2))
    held_gpus = held.draw(st.sets(st.sampled_from(range(numa * gpus_per_numa or 1))))
    states = [
        busy(
            spec,
            cpus=str(CPUSet(held_cpus)),
            gpus=tuple(g for g in held_gpus if g < len(spec.gpus)),
        ),
        NodeState(spec),
    ]
    request = pod(app(cpus, gpus))

    assert _one_by_one(spec, states, request) == _in_bulk(spec, states, request)


def test_one_gpu_pod_on_a_busy_dgx_scores_as_evaluate() -> None:
    spec = NAMED["dgx1-v100"]
    states = [busy(spec, gpus=(0, 1, 2)), busy(spec, cpus="0-23"), NodeState(spec)]
    request = pod(app(4, 1, memory=16 * GiB))
    expected = [evaluate(spec, s, request) for s in states]

    actual = evaluate_many(spec, states, request)

    assert expected == actual


def test_init_containers_are_confirmed_one_by_one_in_bulk_too() -> None:
    """Found by the property above: the pod total (10Gi over three 4Gi NUMA nodes) fits,
    but the init container's 1Gi takes NUMA 0 alone and the memory manager then has no
    hint left for the 9Gi app container; bulk must refuse it as `evaluate` does."""
    spec = small_node(numa=3, cores=1, threads=1, gpus_per_numa=0, links=[], memory=4 * GiB)
    spec = spec.model_copy(
        update={"policies": spec.policies.model_copy(update={"topology_manager_policy": "none"})}
    )
    probe = pod(
        app(name="app0"),
        app(memory=9 * GiB, name="app1"),
        init=(app(memory=1 * GiB, name="init"),),
        policy=PolicyName.NONE,
    )
    states = [NodeState(spec)]
    expected = _one_by_one(spec, states, probe)
    assert isinstance(expected[0], tuple)  # refused, node by node
    assert expected == _in_bulk(spec, states, probe)
