"""`evaluate`'s shortcuts change nothing: memo, whole-node pre-filter, shared tables."""

from __future__ import annotations

import pytest
from helpers import GiB, app, busy, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import nodes, pods
from topologies import load

from numatopo_engine import allocation
from numatopo_engine.allocation import allocate, evaluate
from numatopo_engine.annotations import PolicyName
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.hints import FreeView, build_resources
from numatopo_engine.merging import choose_mask
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.policies import rules_for
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState
from numatopo_engine.topology_tables import tables_for

Outcome = int | str


def _memoised(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Outcome:
    try:
        return evaluate(spec, state, request)
    except UnsatisfiableError as exc:
        return exc.reason


def _uncached(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Outcome:
    try:
        return allocation._decide(spec, state, request, build=False).score
    except UnsatisfiableError as exc:
        return exc.reason


def _allocated(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Outcome:
    try:
        return allocate(spec, state, request, "n").score
    except UnsatisfiableError as exc:
        return exc.reason


def _twin(spec: NumatopologySpec) -> NumatopologySpec:
    """An equal spec in a separate object, as each node's own Numatopology is."""
    return NumatopologySpec.model_validate(spec.to_wire())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=nodes, fills=st.lists(pods, max_size=5), probes=st.lists(pods, min_size=1, max_size=4))
def test_memoised_evaluate_equals_the_uncached_decision(
    spec: NumatopologySpec, fills: list[PodRequest], probes: list[PodRequest]
) -> None:
    """On every state a fill sequence passes through, and on an equal twin node, the memo
    answers what the uncached decision and `allocate` answer, score or reason."""
    state = NodeState(spec)
    twin = _twin(spec)
    for number, fill in enumerate([None, *fills]):
        if fill is not None:
            try:
                state.apply(f"ns/f{number}", allocate(spec, state, fill, "n").assignment)
            except UnsatisfiableError:
                continue
        twin_state, _ = NodeState.rebuild(twin, state.assignments.items())
        for probe in probes:
            expected = _uncached(spec, state, probe)

            actual = [
                _memoised(spec, state, probe),
                _memoised(spec, state, probe),
                _memoised(twin, twin_state, probe),
            ]

            assert [expected] * 3 == actual
            assert expected == _allocated(spec, state, probe)


def test_equal_node_in_an_equal_state_is_answered_from_the_memo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second node with its own spec object but the same hardware and bookings is not
    decided again."""
    spec = load("dgx1-v100")
    request = pod(app(4, 2, memory=16 * GiB))
    first = evaluate(spec, busy(spec, gpus=(0, 5), cpus="0-3"), request)

    def decide_again(*args: object, **kwargs: object) -> None:
        raise AssertionError("decided again")

    monkeypatch.setattr(allocation, "_decide", decide_again)
    twin = _twin(spec)
    second = evaluate(twin, busy(twin, gpus=(0, 5), cpus="0-3"), request)

    assert first == second


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=nodes, request=pods, held=st.sets(st.integers(0, 15)))
def test_node_short_of_a_resource_is_refused_by_every_policy_search(
    spec: NumatopologySpec, request: PodRequest, held: set[int]
) -> None:
    """Whenever the pre-filter skips the mask search, the search would have found nothing."""
    tables = tables_for(spec)
    state = busy(spec, gpus=tuple(g.index for g in spec.gpus if g.index in held))
    need = allocation._sized(request, tables)[0][5]
    resources = build_resources(tables, FreeView.from_state(tables, state), need)
    if not allocation._short_on_node(resources):
        return
    expected = [None] * (len(PolicyName) * 2)

    actual = [
        choose_mask(resources, rules=rules_for(policy), max_numa_nodes=limit,
                    distances=tables.distances)
        for policy in PolicyName
        for limit in (None, 1)
    ]  # fmt: skip

    assert expected == actual


@pytest.mark.parametrize(
    ("first", "second", "shared"),
    [
        pytest.param("dgx1-v100", "dgx1-v100", True, id="same-hardware-shares-one-table"),
        pytest.param("dgx1-v100", "h100-nvswitch", False, id="different-hardware-does-not"),
    ],
)
def test_tables_are_shared_by_equal_specs(first: str, second: str, shared: bool) -> None:
    a, b = _twin(load(first)), _twin(load(second))

    assert shared == (tables_for(a) is tables_for(b))
