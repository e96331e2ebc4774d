"""`evaluate`'s shortcuts change no answer: memo, whole-node pre-filter, shared tables.

Seen only through the public functions: whatever `evaluate` keeps between calls, it
answers what `allocate` answers, on the same node, on an equal twin node, and again
once the node has changed (or changed back).
"""

from __future__ import annotations

import pytest
from helpers import GiB, app, busy, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import nodes, pods
from topologies import load

from numatopo_engine.allocation import (
    Engine,
    NotWarmError,
    allocate,
    evaluate,
    evaluate_many,
    score_many,
)
from numatopo_engine.annotations import Assignment, ContainerAssignment, PolicyName, Scope
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.refusals import Refusal
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState, shared_floor

Outcome = int | str


def _evaluated(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Outcome:
    try:
        return evaluate(spec, state, request)
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
def test_evaluate_answers_what_allocate_answers_as_the_node_fills_and_empties(
    spec: NumatopologySpec, fills: list[PodRequest], probes: list[PodRequest]
) -> None:
    """On every state a fill sequence passes through, asked twice and on an equal twin
    node, then again while the fills are released in reverse (states seen before, so a
    memo keyed on a stale state would answer from the wrong one)."""
    state = NodeState(spec)
    twin = _twin(spec)
    placed: list[str] = []
    seen: list[tuple[NodeState, list[Outcome]]] = []
    for number, fill in enumerate([None, *fills]):
        if fill is not None:
            try:
                state.apply(f"ns/f{number}", allocate(spec, state, fill, "n").assignment)
            except UnsatisfiableError:
                continue
            placed.append(f"ns/f{number}")
        twin_state, _ = NodeState.rebuild(twin, state.assignments.items())
        expected = [_allocated(spec, state, probe) for probe in probes]

        actual = [
            [
                _evaluated(spec, state, p),
                _evaluated(spec, state, p),
                _evaluated(twin, twin_state, p),
            ]
            for p in probes
        ]

        assert [[e] * 3 for e in expected] == actual
        seen.append((state.copy(), expected))
    for count in reversed(range(len(placed))):
        state.release(placed[count])
        earlier, expected = seen[count]  # before `placed[count]` was booked
        assert earlier.free_signature() == state.free_signature()

        assert expected == [_evaluated(spec, state, probe) for probe in probes]


def test_a_twin_node_in_an_equal_state_gets_the_same_answer_and_a_changed_one_a_new_one() -> None:
    """A node with its own spec object but the same hardware and bookings is answered
    alike; booking (then releasing) a pod on the very same state object moves the answer
    there (and back)."""
    spec = load("dgx1-v100")
    request = pod(app(4, 2, memory=16 * GiB))
    state = busy(spec, gpus=(0, 5), cpus="0-3")
    first = evaluate(spec, state, request)
    twin = _twin(spec)
    twin_state = busy(twin, gpus=(0, 5), cpus="0-3")
    # Every GPU but 3 and 7 taken: the only pair left spans both NUMA nodes.
    taken = ContainerAssignment(gpu_indices=[1, 2, 4, 6])
    expected = [first, allocate(spec, state, request, "n").score, 52, 52, first]

    actual = [evaluate(twin, twin_state, request)]
    actual.append(allocate(twin, twin_state, request, "n").score)
    twin_state.apply("ns/more", Assignment(node="n", containers={"more": taken}))
    actual.append(evaluate(twin, twin_state, request))
    actual.append(allocate(twin, twin_state, request, "n").score)
    twin_state.release("ns/more")
    actual.append(evaluate(twin, twin_state, request))

    assert expected == actual
    assert 52 != first, "the booking must change the answer for this test to mean anything"


def _totals(request: PodRequest) -> tuple[int, int, int]:
    """What the pod's app containers ask in all: exclusive CPUs, GPUs, memory bytes."""
    containers = request.containers
    return (
        sum(c.cpu_milli // 1000 for c in containers),
        sum(c.gpus for c in containers),
        sum(c.memory_bytes for c in containers),
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=nodes, request=pods, held=st.sets(st.integers(0, 15)))
def test_a_pod_fits_exactly_when_the_whole_node_has_enough_free_under_policy_none(
    spec: NumatopologySpec, request: PodRequest, held: set[int]
) -> None:
    """The whole-node pre-filter refuses only what no placement could hold: under policy
    none (no NUMA alignment, so the whole node is one candidate) and scope pod, a pod
    fits exactly when the node has its totals free, keeping one shared CPU; under every
    other policy and NUMA limit, a node short on the whole is refused too."""
    state = busy(spec, gpus=tuple(g.index for g in spec.gpus if g.index in held))
    cpus, gpus, memory = _totals(request)
    enough = (
        cpus <= state.free_cpu_count() - (shared_floor(spec) if cpus else 0)
        and gpus <= state.free_gpu_count()
        and memory <= state.free_memory_total()
    )
    loose = pod(*request.containers, policy=PolicyName.NONE, scope=Scope.POD)

    fits = isinstance(_allocated(spec, state, loose), int)

    assert enough == fits
    assert fits == isinstance(_evaluated(spec, state, loose), int)
    if not enough:
        for policy in PolicyName:
            for limit in (None, 1):
                strict = pod(*request.containers, policy=policy, max_numa_nodes=limit)
                reason = _allocated(spec, state, strict)
                assert isinstance(reason, str)
                assert reason == _evaluated(spec, state, strict)


@pytest.mark.parametrize(
    ("first", "second", "same_shape"),
    [
        pytest.param("dgx1-v100", "dgx1-v100", True, id="same-hardware-is-one-shape"),
        pytest.param("dgx1-v100", "h100-nvswitch", False, id="different-hardware-is-not"),
    ],
)
def test_nodes_with_equal_specs_are_decided_together(
    first: str, second: str, same_shape: bool
) -> None:
    """Separate spec objects of equal content are one hardware shape for `evaluate_many`,
    which answers each node as `evaluate` does; a node of other hardware is refused."""
    a, b = _twin(load(first)), _twin(load(second))
    states = [busy(a, gpus=(1,)), busy(b, gpus=(2, 3), cpus="0-7")]
    request = pod(app(4, 2, memory=GiB))

    if not same_shape:
        with pytest.raises(ValueError, match="hardware"):
            evaluate_many(a, states, request)
        return
    answers = evaluate_many(a, states, request)

    assert [evaluate(a, states[0], request), evaluate(b, states[1], request)] == answers
    assert not any(isinstance(answer, Refusal) for answer in answers)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=nodes, fills=st.lists(pods, max_size=4), probes=st.lists(pods, min_size=1, max_size=3))
def test_warm_only_answers_what_a_full_call_answers_or_nothing(
    spec: NumatopologySpec, fills: list[PodRequest], probes: list[PodRequest]
) -> None:
    """`score_many(..., warm_only=True)`, from what the engine keeps alone, answers as the
    full call did on the same nodes, or raises `NotWarmError` (never another answer)."""
    engine = Engine()
    state = NodeState(spec, tables=engine.tables_of(spec))
    states = [state]
    for index, fill in enumerate(fills):
        try:
            assignment = allocate(spec, state, fill, "n").assignment
        except UnsatisfiableError:
            continue
        state = state.copy()
        state.apply(f"fill/{index}", assignment)
        states.append(state)
    for probe in probes:
        with pytest.raises(NotWarmError):
            score_many(spec, states, probe, engine=Engine(), warm_only=True)
        full = score_many(spec, states, probe, engine=engine)
        try:
            warm = score_many(spec, states, probe, engine=engine, warm_only=True)
        except NotWarmError:
            continue
        assert full.scores.tolist() == warm.scores.tolist()
        assert full.rank.tolist() == warm.rank.tolist()
        assert [(at.tolist(), why) for at, why in full.refused] == [
            (at.tolist(), why) for at, why in warm.refused
        ]
