"""`evaluate_many` answers, node by node, exactly what `evaluate` answers."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import GiB, app, busy, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import NAMED
from test_fast_evaluate import BENCH_MIX, _filled, fills, requests, varied_nodes
from topologies import load

from numatopo_engine import allocation, batch_evaluate
from numatopo_engine.allocation import evaluate, evaluate_many, group_by_shape, score_many
from numatopo_engine.annotations import PolicyName
from numatopo_engine.errors import InvalidRequestError, UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.refusals import Refusal, summary
from numatopo_engine.request import PodRequest
from numatopo_engine.scoring import compose_score
from numatopo_engine.state import NodeState

Answer = int | tuple[str, str]
SHAPES = {**NAMED, **{name: load(name) for name in ("pcie-8gpu", "gb200-like")}}


def _one_by_one(spec: NumatopologySpec, states: list[NodeState], probe: PodRequest) -> list[Answer]:
    answers: list[Answer] = []
    for state in states:
        try:
            answers.append(evaluate(spec, state, probe))
        except UnsatisfiableError as exc:
            answers.append((summary(exc.reason), exc.reason))
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
    states = [state for held in helds for state in _filled(spec, held, placed)]
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


@pytest.mark.parametrize("shape", ["dgx1-v100", "h100-nvswitch", "pcie-8gpu", "cpu-2socket-ht"])
@pytest.mark.parametrize("request_", BENCH_MIX[:4])
def test_common_requests_are_decided_in_bulk(
    shape: str, request_: PodRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler's usual pods never fall back to `evaluate` node by node."""
    states = _cluster(shape)
    expected = _one_by_one(states[0].topology, states, request_)

    def one_by_one(*_: object) -> None:
        raise AssertionError("fell back to evaluate")

    monkeypatch.setattr(allocation, "_one", one_by_one)
    actual = _in_bulk(states[0].topology, states, request_)

    assert expected == actual


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


def test_bulk_refusals_come_as_one_pair_and_are_worded_only_when_read() -> None:
    """A scheduler sends the summary of thousands of refused nodes without a Refusal each."""
    states = _cluster("h100-nvswitch")
    scored = score_many(states[0].topology, states, BENCH_MIX[2].values[0])  # 8 GPUs
    summary = "best-effort: the node does not have 32 CPUs and 128Gi memory and 8 GPUs free"
    expected = ([([1, 2, 3, 4, 6, 7, 8, 9, 11], summary)], True)

    actual = (
        [(where.tolist(), text) for where, text in scored.refused],
        scored.refusal(11)._reason is None,
    )

    assert expected == actual


def test_a_refusal_words_its_detail_only_when_read() -> None:
    """The summary is there at once; the per-NUMA text is built on first read."""
    spec = NAMED["h100-nvswitch"]
    state = busy(spec, gpus=(0, 5))
    big = pod(app(4, 4), policy=PolicyName.SINGLE_NUMA_NODE)
    [refusal] = evaluate_many(spec, [state], big)
    assert isinstance(refusal, Refusal)
    expected = (
        "single-numa-node: no NUMA node has 4 CPUs and 4 GPUs free",
        "single-numa-node: no NUMA node has 4 CPUs and 4 GPUs free "
        "(NUMA 0: 104 CPUs, 3 GPUs free; NUMA 1: 104 CPUs, 3 GPUs free)",
        True,
    )
    unread = refusal._reason is None

    actual = (refusal.summary, str(refusal), unread)

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


# Terms whose weighted sum lands on .5 exactly, and near it, with and without GPUs.
COMPOSE_CASES = [
    pytest.param(1.0, 1.0, [0.0125], False, id="cpu-pack-of-sixty-point-five-rounds-to-even"),
    pytest.param(1.0, 1.0, [0.0375], False, id="cpu-pack-of-sixty-one-point-five-rounds-up"),
    pytest.param(0.5, 1.0, [1 / 60], True, id="gpu-thirds-and-sixtieths"),
    pytest.param(1 / 3, 0.7, [0.45, 0.55], True, id="two-fills-averaged"),
    pytest.param(0.25, 0.0, [], True, id="no-fills-pack-is-one"),
    pytest.param(1.0, 2.0, [1.0], True, id="over-100-clamped"),
]


@pytest.mark.parametrize(("span", "links", "fills", "with_gpus"), COMPOSE_CASES)
def test_the_array_score_rounds_as_compose_score(
    span: float, links: float, fills: list[float], with_gpus: bool
) -> None:
    """Same float operations in the same order, and half to even like `round`."""
    expected = compose_score(span, links, fills, with_gpus=with_gpus)
    pack = sum(fills) / len(fills) if fills else 1.0

    actual = int(
        batch_evaluate._compose(
            np.array([span]), np.array([links]), np.array([pack]), with_gpus=with_gpus
        )[0]
    )

    assert expected == actual


@given(
    st.floats(0, 1),
    st.floats(0, 1),
    st.lists(st.floats(0, 1), max_size=2),
    st.booleans(),
)
def test_the_array_score_equals_compose_score_for_any_terms(
    span: float, links: float, fills: list[float], with_gpus: bool
) -> None:
    expected = compose_score(span, links, fills, with_gpus=with_gpus)
    pack = sum(fills) / len(fills) if fills else 1.0

    actual = int(
        batch_evaluate._compose(
            np.array([span]), np.array([links]), np.array([pack]), with_gpus=with_gpus
        )[0]
    )

    assert expected == actual


def test_one_gpu_pod_on_a_busy_dgx_scores_as_evaluate() -> None:
    spec = NAMED["dgx1-v100"]
    states = [busy(spec, gpus=(0, 1, 2)), busy(spec, cpus="0-23"), NodeState(spec)]
    request = pod(app(4, 1, memory=16 * GiB))
    expected = [evaluate(spec, s, request) for s in states]

    actual = evaluate_many(spec, states, request)

    assert expected == actual
