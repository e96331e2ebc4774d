"""The extender's candidate pass (`Ledger.judged_candidates`): candidates grouped by
hardware shape, the unresolvable ones in request order, staleness decided exactly at
the heartbeat limit, and the judged pod's own booking left out of a copy only."""

from __future__ import annotations

from extender_candidates import candidates_of
from numatopo_engine import allocation
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.pod_request import request_from_pod
from numatopo_engine.state import NodeState
from numatopo_operator import extender, translate
from numatopo_operator.ledger import Ledger
from numatopo_operator.settings import OperatorSettings

from .conftest import h100_spec, make_pod

LIMIT = 60.0
NOW = 10_000.0


def _smaller(spec: NumatopologySpec) -> NumatopologySpec:
    """Another hardware shape: the same machine with its last GPU gone."""
    return spec.model_copy(update={"gpus": spec.gpus[:-1]})


def _fleet() -> Ledger:
    ledger = Ledger()
    big, small = h100_spec(), _smaller(h100_spec())
    beats = {"a": NOW, "b": NOW, "c": NOW - LIMIT - 0.5, "d": NOW - LIMIT + 0.5, "e": NOW}
    for node, beat in beats.items():
        ledger.set_topology(node, small if node == "b" else big)
        ledger.see_freshness(node, stale=None, heartbeat=beat, gpu_mode=None)
    ledger.see_freshness("e", stale="the exporter says so", heartbeat=NOW, gpu_mode=None)
    ledger.see_freshness("gone", stale=None, heartbeat=NOW, gpu_mode=None)  # no topology
    return ledger


def test_candidates_are_grouped_by_shape_and_the_rest_say_why_in_request_order():
    ledger = _fleet()
    groups, refused = ledger.judged_candidates(
        ["unknown", "a", "c", "b", "gone", "d", "e"], LIMIT, NOW
    )
    assert [(where, len(states)) for _, where, states in groups.values()] == [
        (["a", "d"], 2),
        (["b"], 1),
    ]
    # Just past the limit is stale, just within it is not: decided as `stale_reason` does.
    stale_c = ledger.stale_reason("c", LIMIT, NOW)
    assert stale_c is not None
    assert ledger.stale_reason("d", LIMIT, NOW) is None
    assert list(refused.items()) == [
        ("unknown", translate.NO_NUMATOPOLOGY),
        ("c", stale_c),
        ("gone", translate.NO_NUMATOPOLOGY),
        ("e", "the exporter says so"),
    ]
    for _, where, states in groups.values():
        assert states == [ledger.frozen_state(node) for node in where]


def test_the_judged_pod_is_left_out_of_a_copy_and_judged_as_a_hand_built_fleet_is():
    ledger = _fleet()
    settings = OperatorSettings()
    pod = make_pod("p", node=None, policy=None, gpus=8, cpu="8")
    booked = request_from_pod(pod, settings.resources)
    decision = allocation.allocate(h100_spec(), NodeState(h100_spec()), booked, "a")
    ledger.reserve("a", booked.key, decision.assignment)
    frozen = ledger.frozen_state("a")
    assert frozen is not None
    assert booked.key in frozen.assignments

    nodes = ["a", "b", "d"]
    groups, refused = ledger.judged_candidates(nodes, LIMIT, NOW, without=booked.key)
    judged = {}
    for _, where, states in groups.values():
        judged.update(zip(where, states, strict=True))
    assert booked.key not in judged["a"].assignments  # the pod's earlier attempt
    assert booked.key in frozen.assignments  # the ledger's copy is left as it was
    assert judged["d"] is ledger.frozen_state("d")

    released = extender.Candidates(groups, refused, without=booked.key)
    by_hand = candidates_of([(n, ledger.topology(n), ledger.frozen_state(n)) for n in nodes], {})
    fresh, scanned = (
        extender.judge_candidates(booked, taken, allocation.Engine())
        for taken in (released, by_hand)
    )
    assert fresh == scanned
    assert "a" in fresh.scores  # fits only once its own booking is left out
    assert (
        extender.judge_candidates(booked, extender.Candidates(groups, refused, without="other/pod"))
        == fresh
    )


def test_a_later_pass_reads_each_change_since_the_frozen_copies_were_made():
    """The pass trusts a record's frozen copy while its live state is unchanged: a
    booking, a dropped Numatopology and new hardware must each show in the next pass."""
    ledger = _fleet()
    nodes = ["a", "b", "d"]
    ledger.judged_candidates(nodes, LIMIT, NOW)  # every candidate's copy made
    before = ledger.frozen_state("a")
    pod = make_pod("p", node=None, policy=None, gpus=2, cpu="4")
    booked = request_from_pod(pod, OperatorSettings().resources)
    decision = allocation.allocate(h100_spec(), NodeState(h100_spec()), booked, "a")
    ledger.reserve("a", booked.key, decision.assignment)
    ledger.drop_topology("b")
    ledger.set_topology("d", _smaller(h100_spec()))

    groups, refused = ledger.judged_candidates(nodes, LIMIT, NOW)
    assert refused == {"b": translate.NO_NUMATOPOLOGY}
    assert [where for _, where, _ in groups.values()] == [["a"], ["d"]]
    (_, _, [state_a]), (topology_d, _, [state_d]) = groups.values()
    assert state_a is not before
    assert booked.key in state_a.assignments
    assert booked.key not in before.assignments
    assert topology_d == _smaller(h100_spec())
    assert state_d.topology == topology_d
