"""The ledger (pure): bookings from pod annotations, in-flight reservations, overlaps."""

from __future__ import annotations

import pytest

from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import OverlapError
from numatopo_operator.ledger import Ledger
from numatopo_operator.translate import Booking

NODE = "h100-a"


def gpus(*indices: int, cpus: str = "", seq: int = 0) -> Assignment:
    return Assignment(
        node=NODE,
        seq=seq,
        numa_nodes=[0],
        containers={
            "main": ContainerAssignment(cpus=CPUSet.parse(cpus), gpu_indices=list(indices))
        },
    )


def booking(key: str, assignment: Assignment) -> Booking:
    return Booking(key=key, node=NODE, assignment=assignment)


@pytest.fixture
def ledger(h100) -> Ledger:
    found = Ledger()
    found.set_topology(NODE, h100)
    return found


def test_observed_booking_is_taken(ledger):
    ledger.observe(booking("ns/a", gpus(0, 1, cpus="2-3")))

    assert frozenset(range(2, 8)) == ledger.state(NODE).free_gpus()
    assert 1 == ledger.pods_on(NODE)


def test_bookings_seen_before_the_topology_count_once_it_arrives(h100):
    ledger = Ledger()
    ledger.observe(booking("ns/a", gpus(0)))

    ledger.set_topology(NODE, h100)

    assert 7 == len(ledger.state(NODE).free_gpus())


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param("ns/z-earlier", "ns/a-later", id="earlier-listed-first"),
        pytest.param("ns/a-later", "ns/z-earlier", id="later-listed-first-is-evicted"),
    ],
)
def test_the_earlier_decision_keeps_an_overlapping_gpu(ledger, first, second):
    """Whatever order the list comes in, the pod decided first keeps GPU 0 (the node
    agent's rule: `claim_order`), whatever its name."""
    seq = {"ns/z-earlier": 3, "ns/a-later": 4}
    ledger.observe(booking(first, gpus(0, seq=seq[first])))
    ledger.observe(booking(second, gpus(0, seq=seq[second])))

    assert ["ns/a-later"] == list(ledger.untrusted(NODE))
    assert ["ns/z-earlier"] == list(ledger.state(NODE).assignments)


def test_an_untrusted_booking_is_trusted_once_the_holder_goes(ledger):
    ledger.observe(booking("ns/older", gpus(0, seq=1)))
    ledger.observe(booking("ns/newer", gpus(0, 1, seq=2)))

    ledger.forget("ns/older")

    assert {} == dict(ledger.untrusted(NODE))
    assert ["ns/newer"] == list(ledger.state(NODE).assignments)


def test_in_flight_survives_an_older_event_without_the_annotation(ledger):
    """An event that predates our write must not free what we just reserved."""
    ledger.reserve(NODE, "ns/a", gpus(3))

    ledger.observe_absent("ns/a")

    assert ledger.holds("ns/a")
    assert 3 not in ledger.state(NODE).free_gpus()


def test_in_flight_becomes_observed_without_double_counting(ledger):
    ledger.reserve(NODE, "ns/a", gpus(3))

    ledger.observe(booking("ns/a", gpus(3)))

    assert 7 == len(ledger.state(NODE).free_gpus())
    assert 1 == len(ledger)


@pytest.mark.parametrize(
    "release",
    [
        pytest.param(lambda ledger: ledger.cancel("ns/a"), id="write-failed"),
        pytest.param(lambda ledger: ledger.forget("ns/a"), id="pod-deleted"),
    ],
)
def test_releasing_frees_everything(ledger, release):
    ledger.reserve(NODE, "ns/a", gpus(0, 1, cpus="2-9"))

    release(ledger)

    assert not ledger.holds("ns/a")
    assert 8 == len(ledger.state(NODE).free_gpus())
    assert 206 == len(ledger.state(NODE).free_cpus())


def test_a_reservation_that_clashes_is_refused(ledger):
    ledger.observe(booking("ns/a", gpus(0)))

    with pytest.raises(OverlapError, match="GPU 0 is held by ns/a"):
        ledger.reserve(NODE, "ns/b", gpus(0))

    assert not ledger.holds("ns/b")


def test_changes_mark_the_node_dirty_once(ledger):
    ledger.take_dirty()
    ledger.observe(booking("ns/a", gpus(0)))
    ledger.observe(booking("ns/b", gpus(1)))

    assert {NODE} == ledger.take_dirty()
    assert set() == ledger.take_dirty()


def test_no_topology_no_state():
    ledger = Ledger()

    with pytest.raises(KeyError, match="no Numatopology for node 'x'"):
        ledger.reserve("x", "ns/a", gpus(0))

    assert None is ledger.state("x")


# -- resync: a fresh list of pods, with the watch stream going on meanwhile ---------------


def listed(key: str, *indices: int, uid: str = "") -> Booking:
    """A booking as a listed pod shows it, one GPU per index."""
    return Booking(key=key, node=NODE, assignment=gpus(*indices), uid=uid)


@pytest.mark.parametrize(
    ("before", "during", "pods", "expected"),
    [
        pytest.param(
            [lambda ledger: ledger.observe(listed("ns/gone", 0))],
            [],
            [listed("ns/b", 1)],
            {"ns/b": [1]},
            id="the-list-replaces-what-a-standby-saw-before",
        ),
        pytest.param(
            [],
            [lambda ledger: ledger.observe(listed("ns/new", 2))],
            [listed("ns/b", 1)],
            {"ns/b": [1], "ns/new": [2]},
            id="a-booking-seen-during-the-list-is-kept",
        ),
        pytest.param(
            [],
            [lambda ledger: ledger.forget("ns/b", uid="u-1")],
            [listed("ns/b", 1, uid="u-1")],
            {},
            id="a-release-during-the-list-is-not-lost",
        ),
        pytest.param(
            [],
            [lambda ledger: ledger.forget("ns/b", uid="u-old")],
            [listed("ns/b", 1, uid="u-new")],
            {"ns/b": [1]},
            id="the-end-of-an-older-pod-of-that-name-keeps-the-new-one",
        ),
        pytest.param(
            [],
            [lambda ledger: ledger.observe_absent("ns/b")],
            [listed("ns/b", 1)],
            {"ns/b": [1]},
            id="no-assignment-seen-meanwhile-keeps-the-listed-booking",
        ),
        pytest.param(
            [lambda ledger: ledger.reserve(NODE, "ns/mine", gpus(3))],
            [],
            [],
            {"ns/mine": [3]},
            id="an-in-flight-reservation-survives",
        ),
    ],
)
def test_resync(ledger, before, during, pods, expected):
    """After a resync the ledger books what the list shows, corrected by what the watch
    stream said while the list was on its way."""
    for step in before:
        step(ledger)
    ledger.begin_resync()
    for step in during:
        step(ledger)
    ledger.end_resync(pods)

    actual = {
        key: sorted(i for c in assignment.containers.values() for i in c.gpu_indices)
        for key, assignment in ledger.state(NODE).assignments.items()
    }

    assert expected == actual
