"""The steering answer names the GPUs of the container the kubelet is admitting (the
first in flight in admission order that fits the request), and otherwise nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_exporter.steering.choice import InFlight, answer, containers_in_flight

UUIDS = [f"GPU-{n:08x}-0000-0000-0000-000000000000" for n in range(8)]


def flight(uid: str, created: str | float, gpus: list[int], container: str = "main",
           order: int = 0) -> InFlight:  # fmt: skip
    return InFlight(
        pod_uid=uid, pod_key=f"default/{uid}", created=created, container=container,
        container_order=order, gpus=tuple(UUIDS[g] for g in gpus), gpu_indices=tuple(gpus),
    )  # fmt: skip


def test_first_in_creation_order_of_the_asked_size_is_answered() -> None:
    older = flight("b", "2024-05-01T10:00:00Z", [2])
    newer = flight("a", "2024-05-01T10:00:05Z", [3])
    pair = flight("c", "2024-05-01T09:00:00Z", [0, 1])
    chosen = answer(UUIDS, [], 1, [newer, pair, older], set())
    assert chosen.device_ids == [UUIDS[2]]
    assert chosen.candidate == older
    # Once consumed, the next one of that size.
    assert answer(UUIDS, [], 1, [newer, older], {older.key}).device_ids == [UUIDS[3]]
    assert answer(UUIDS, [], 2, [newer, pair, older], set()).candidate == pair


def test_ties_go_by_pod_uid_then_container_order() -> None:
    same = "2024-05-01T10:00:00Z"
    init = flight("p", same, [4], container="init", order=0)
    app = flight("p", same, [5], container="app", order=1)
    other = flight("q", same, [6])
    assert answer(UUIDS, [], 1, [other, app, init], set()).candidate == init
    assert answer(UUIDS, [], 1, [other, app, init], {init.key}).candidate == app


def test_epoch_seconds_and_rfc3339_order_together_and_garbage_goes_last() -> None:
    text = flight("a", "2024-05-01T10:00:00Z", [1])
    seconds = flight("b", 1714557599.0, [2])  # one second earlier
    garbage = flight("c", "yesterday", [3])
    assert answer(UUIDS, [], 1, [garbage, text, seconds], set()).candidate == seconds
    assert answer(UUIDS, [], 1, [garbage], set()).candidate == garbage


def test_a_container_whose_gpus_are_not_offered_is_skipped() -> None:
    # Already admitted (it holds GPU 0), so the kubelet is admitting the next one.
    admitted = flight("a", 1.0, [0])
    waiting = flight("b", 2.0, [1])
    chosen = answer(UUIDS[1:], [], 1, [admitted, waiting], set())
    assert chosen.candidate == waiting


def test_must_include_is_respected_and_counts_as_available() -> None:
    pair = flight("a", 1.0, [0, 1])
    assert answer(UUIDS[1:], [UUIDS[0]], 2, [pair], set()).device_ids == UUIDS[:2]
    chosen = answer(UUIDS, [UUIDS[5]], 2, [pair], set())
    assert chosen.device_ids is None
    assert "not offered" in chosen.why


def test_index_device_ids_and_replicas_map_back() -> None:
    by_index = [str(n) for n in range(4)]
    assert answer(by_index, [], 1, [flight("a", 1.0, [2])], set()).device_ids == ["2"]
    replicas = [f"{UUIDS[0]}::{r}" for r in range(3)]
    assert answer(replicas, [], 1, [flight("a", 1.0, [0])], set()).device_ids == [replicas[0]]


def test_nothing_to_go_by_means_no_answer() -> None:
    assert answer(UUIDS, [], 1, [], set()).device_ids is None
    assert answer(UUIDS, [], 0, [flight("a", 1.0, [0])], set()).device_ids is None
    assert answer(UUIDS, [], 3, [flight("a", 1.0, [0])], set()).device_ids is None


def test_containers_in_flight_follow_admission_order_and_skip_gpu_less_ones() -> None:
    assignment = Assignment(
        node="n1",
        seq=7,
        containers={
            "app": ContainerAssignment(gpus=[UUIDS[1]], gpu_indices=[1]),
            "sidecar": ContainerAssignment(),
            "init": ContainerAssignment(gpus=[UUIDS[0]], gpu_indices=[0]),
        },
    )
    found = containers_in_flight("u", "ns/p", "2024-05-01T10:00:00Z",
                                 ["init", "app", "sidecar"], assignment)  # fmt: skip
    assert [(f.container, f.container_order, f.gpus, f.seq) for f in found] == [
        ("init", 0, (UUIDS[0],), 7),
        ("app", 1, (UUIDS[1],), 7),
    ]


ids = st.sampled_from(UUIDS + [str(n) for n in range(8)] + [f"{UUIDS[0]}::1"])
flights = st.builds(
    InFlight,
    pod_uid=st.sampled_from("abc"),
    pod_key=st.just("ns/p"),
    created=st.one_of(st.floats(allow_nan=True), st.text(max_size=25)),
    container=st.sampled_from(["x", "y"]),
    container_order=st.integers(-2, 3),
    gpus=st.lists(st.sampled_from(UUIDS), max_size=4).map(tuple),
    gpu_indices=st.lists(st.integers(0, 9), max_size=4).map(tuple),
    seq=st.integers(0, 5),
)


@given(
    available=st.lists(ids, max_size=10),
    must_include=st.lists(ids, max_size=3),
    size=st.integers(-1, 5),
    candidates=st.lists(flights, max_size=6),
    consumed=st.sets(st.tuples(st.sampled_from("abc"), st.sampled_from(["x", "y"]))),
)
def test_an_answer_is_offered_ids_of_the_asked_size_or_none(
    available: list[str], must_include: list[str], size: int,
    candidates: list[InFlight], consumed: set[tuple[str, str]],
) -> None:  # fmt: skip
    chosen = answer(available, must_include, size, candidates, consumed)
    if chosen.device_ids is None:
        assert chosen.candidate is None
        return
    assert len(chosen.device_ids) == size
    assert len(set(chosen.device_ids)) == size
    assert set(chosen.device_ids) <= set(available) | set(must_include)
    assert set(must_include) <= set(chosen.device_ids)
    assert chosen.candidate is not None
    assert chosen.candidate.key not in consumed
