"""No decision path ever hands out the last shared CPU of a node (issue 10).

The kubelet's static policy runs every non-exclusive container on one pool, the online
CPUs no container holds exclusively, and never empties it; reserved CPUs are never
given exclusively, so they keep that pool non-empty on their own. On a node without an
online reserved CPU, an exclusive request must therefore leave one allocatable CPU free.
Every public entry point is asked, since each reaches its answer its own way (`allocate`
by the general search, `evaluate` by table look-ups, `evaluate_many` and `score_many` by
arrays over many nodes), and each must give the same answer, reason included.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from helpers import app, busy, pod, small_node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_evaluate_matches_allocate import filled_states, fills, requests, varied_nodes

from numatopo_engine.allocation import Engine, allocate, evaluate, evaluate_many, score_many
from numatopo_engine.annotations import CpuMode, Scope
from numatopo_engine.errors import InvalidRequestError, UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.refusals import Kind, Refusal, Shortfall, Wanted, word
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState, shared_floor

Answer = int | str  # a score, or a refusal reason


def shared_pool(cpus: int, free: int, *, detail: bool = True) -> str:
    """The words of a last-shared-CPU refusal of a best-effort pod."""
    refusal = Shortfall(Kind.SHARED_POOL, "best-effort", (Wanted("CPUs", cpus),), bound=free)
    return word(refusal, detail=detail)


def two_cpu_node(reserved: str = "") -> NumatopologySpec:
    """One NUMA node, two single-thread cores (CPUs 0 and 1)."""
    spec = small_node(numa=1, cores=2, threads=1, gpus_per_numa=0, links=[])
    return NumatopologySpec.model_validate({**spec.to_wire(), "reservedCPUs": reserved})


def _allocate(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Answer:
    try:
        return allocate(spec, state, request, "n").score
    except UnsatisfiableError as exc:
        return exc.reason


def _evaluate(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Answer:
    try:
        return evaluate(spec, state, request)
    except UnsatisfiableError as exc:
        return exc.reason


def _many(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Answer:
    [answer] = evaluate_many(spec, [state], request)
    return answer.reason if isinstance(answer, Refusal) else answer


def _scored(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> Answer:
    scored = score_many(spec, [state], request)
    [score] = scored.scores.tolist()
    return scored.refusal(0).reason if score < 0 else int(score)


PATHS: dict[str, Callable[[NumatopologySpec, NodeState, PodRequest], Answer]] = {
    "allocate": _allocate,
    "evaluate": _evaluate,
    "evaluate_many": _many,
    "score_many": _scored,
}
by_path = pytest.mark.parametrize("path", sorted(PATHS))


@by_path
def test_two_cpus_on_a_two_cpu_node_without_reserved_cpus_are_refused(path: str) -> None:
    spec = two_cpu_node()

    answer = PATHS[path](spec, NodeState(spec), pod(app(2)))

    assert shared_pool(2, 2) == answer


@by_path
def test_the_last_free_cpu_is_refused_once_the_other_is_exclusive(path: str) -> None:
    spec = two_cpu_node()

    answer = PATHS[path](spec, busy(spec, cpus="0"), pod(app(1)))

    assert shared_pool(1, 1) == answer


@by_path
def test_one_cpu_of_two_fits_and_leaves_the_other_shared(path: str) -> None:
    spec = two_cpu_node()

    answer = PATHS[path](spec, NodeState(spec), pod(app(1)))

    assert isinstance(answer, int)


@by_path
def test_a_reserved_cpu_keeps_the_pool_so_every_allocatable_cpu_may_go(path: str) -> None:
    spec = two_cpu_node(reserved="0")

    answer = PATHS[path](spec, NodeState(spec), pod(app(1)))

    assert isinstance(answer, int)


def test_a_reserved_cpu_keeps_the_pool_and_is_never_given() -> None:
    spec = two_cpu_node(reserved="0")

    cpus = allocate(spec, NodeState(spec), pod(app(1)), "n").assignment.containers["app"].cpus

    assert "1" == str(cpus)


def test_an_offline_reserved_cpu_does_not_keep_the_pool() -> None:
    """CPU 7 is named reserved but is not online: the pool would still be empty."""
    spec = two_cpu_node(reserved="7")

    with pytest.raises(UnsatisfiableError) as raised:
        allocate(spec, NodeState(spec), pod(app(2)), "n")

    assert shared_pool(2, 2) == raised.value.reason


def test_a_node_short_of_cpus_says_so_before_the_shared_pool() -> None:
    """Asking more than is free is the plainer reason, as on nodes with reserved CPUs."""
    spec = two_cpu_node()

    with pytest.raises(UnsatisfiableError) as raised:
        allocate(spec, NodeState(spec), pod(app(3)), "n")

    assert "shared pool" not in raised.value.reason


def test_containers_placed_one_by_one_may_not_take_the_last_cpu_together() -> None:
    spec = two_cpu_node()
    request = pod(app(1, name="a"), app(1, name="b"), scope=Scope.CONTAINER)

    with pytest.raises(UnsatisfiableError) as raised:
        allocate(spec, NodeState(spec), request, "n")

    assert shared_pool(1, 1) == raised.value.reason


def test_shared_pool_cpus_take_nothing_exclusive_and_fit() -> None:
    """`cpu: numa` containers run on the shared pool; they cannot empty it."""
    spec = two_cpu_node()

    decision = allocate(spec, NodeState(spec), pod(app(2), cpu=CpuMode.NUMA), "n")

    assert not decision.assignment.containers["app"].exclusive


def test_bulk_refusals_for_the_shared_pool_get_their_own_summary() -> None:
    """Nodes refused for want of room and for their last shared CPU, decided together."""
    spec = two_cpu_node()
    states = [NodeState(spec), busy(spec, cpus="0"), busy(spec, cpus="0-1"), NodeState(spec)]
    request = pod(app(1))
    expected = [_evaluate(spec, s, request) for s in states]

    scored = score_many(spec, states, request)
    actual = [
        scored.refusal(i).reason if score < 0 else score
        for i, score in enumerate(scored.scores.tolist())
    ]

    assert expected == actual
    assert sorted(
        [
            ([1], shared_pool(1, 1, detail=False)),
            ([2], _summary(spec, states[2], request)),
        ]
    ) == sorted((indices.tolist(), text) for indices, text in scored.refused)


def _summary(spec: NumatopologySpec, state: NodeState, request: PodRequest) -> str:
    with pytest.raises(UnsatisfiableError) as raised:
        evaluate(spec, state, request)
    return raised.value.summary


def test_the_floor_is_one_cpu_only_without_a_reserved_one() -> None:
    assert (1, 0) == (shared_floor(two_cpu_node()), shared_floor(two_cpu_node(reserved="0")))


def test_the_row_layout_starts_with_free_cpus_per_numa_node() -> None:
    """The bulk check sums a row's first columns as the node's free CPUs."""
    spec = small_node(numa=2, cores=2, threads=1, gpus_per_numa=0, links=[])
    state = busy(spec, cpus="0")
    engine = Engine()
    tables = engine.tables_of(spec)
    columns = len(engine.layout_of(tables).numa_ids)

    row = np.frombuffer(engine.row(tables, state), dtype=np.int64)

    assert state.free_cpu_count() == int(row[:columns].sum())


def _shared_left(spec: NumatopologySpec, state: NodeState) -> int:
    """CPUs in the kubelet's shared pool: online, held exclusively by no one."""
    online = spec.online_cpus().ids
    held = {
        cpu
        for assignment in state.assignments.values()
        for container in assignment.containers.values()
        if container.exclusive
        for cpu in container.cpus.ids
    }
    return len(online - held)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=varied_nodes(),
    held=st.sets(st.integers(0, 63), max_size=6),
    placed=fills,
    probes=st.lists(requests, min_size=1, max_size=3),
)
def test_no_path_accepts_a_pod_that_would_empty_the_shared_pool(
    spec: NumatopologySpec, held: set[int], placed: list[PodRequest], probes: list[PodRequest]
) -> None:
    """Whatever a path accepts, booking the pod leaves the shared pool non-empty; every
    path answers what `allocate` does, the same score or the same reason (which names the
    pool when that is why)."""
    for state in filled_states(spec, held, placed):
        pool_before = _shared_left(spec, state)
        # The boundary itself, every time: exactly every free CPU, exclusively.
        every_free = pod(app(state.free_cpu_count()), name="every-free")
        for probe in [*probes, every_free]:
            try:
                decision = allocate(spec, state, probe, "n")
            except InvalidRequestError:
                continue
            except UnsatisfiableError as exc:
                decision, expected = None, exc.reason
            else:
                expected = decision.score

            actual = {name: path(spec, state, probe) for name, path in PATHS.items()}

            assert dict.fromkeys(PATHS, expected) == actual
            if decision is not None:
                after = state.copy()
                after.apply("ns/probe", decision.assignment)
                # An already empty pool (CPUs held by hand above) cannot lose a CPU either.
                assert _shared_left(spec, after) >= min(1, pool_before)
