"""What `filter` says about refused nodes: one text per kind of shortage, not per node."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender_scores import extender_scores
from numatopo_engine import refusals
from numatopo_engine.allocation import allocate, evaluate, score_many
from numatopo_engine.annotations import PolicyName
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Numatopology
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.state import NodeState
from numatopo_operator.extender import judge_off_loop
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

NODE_JSON = Path(__file__).resolve().parents[1] / "fixtures" / "topologies" / "h100-nvswitch.json"


def pod(name: str, cpus: int, gpus: int, policy: PolicyName) -> PodRequest:
    container = ContainerRequest(name="main", cpu_milli=cpus * 1000, gpus=gpus)
    return PodRequest("ml", name, (container,), options=TopologyOptions(policy=policy))


async def test_nodes_short_of_the_same_thing_get_the_same_reason() -> None:
    """Two nodes with different free amounts refuse a 5-GPU single-NUMA pod in one text
    (kube-scheduler then counts them), while the engine's own reasons differ per node."""
    spec = Numatopology.model_validate_json(NODE_JSON.read_text()).spec
    runtime = Runtime(OperatorSettings())
    states = {"a": NodeState(spec), "b": NodeState(spec)}
    filler = pod("filler", 8, 2, PolicyName.BEST_EFFORT)
    booked = allocate(spec, states["b"], filler, "b").assignment
    states["b"].apply(filler.key, booked)
    for node in states:
        runtime.ledger.set_topology(node, spec)
    runtime.ledger.reserve("b", filler.key, booked)
    big = pod("big", 4, 5, PolicyName.SINGLE_NUMA_NODE)

    verdicts = await judge_off_loop(runtime, big, ["a", "b"])

    detailed = []
    for node in ("a", "b"):
        with pytest.raises(UnsatisfiableError) as refused:
            allocate(spec, states[node], big, node)
        detailed.append(refused.value.reason)
    assert {} == verdicts.scores
    assert verdicts.failed["a"] == verdicts.failed["b"]
    assert detailed[0] != detailed[1]
    assert "NUMA 0:" not in verdicts.failed["a"]
    assert verdicts.failed["a"].startswith("single-numa-node: no NUMA node has")


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        pytest.param(
            "single-numa-node: no NUMA node has 4 nvidia.com/gpu free "
            "(NUMA 0: 3 nvidia.com/gpu free; NUMA 1: 2 nvidia.com/gpu free)",
            "single-numa-node: no NUMA node has 4 nvidia.com/gpu free",
            id="drops-the-per-numa-amounts",
        ),
        pytest.param(
            "restricted: no preferred placement within 1 NUMA node(s) has 2 nvidia.com/gpu "
            "(all pairs directly linked) free (NUMA 0: 1 nvidia.com/gpu free)",
            "restricted: no preferred placement within 1 NUMA node(s) has 2 nvidia.com/gpu "
            "(all pairs directly linked) free",
            id="keeps-the-links-requirement",
        ),
        pytest.param(
            "best-effort: cpu: 300 cpu requested, the node has 208 cpu in all",
            "best-effort: cpu: 300 cpu requested, the node has 208 cpu in all",
            id="hardware-limit-has-no-detail-to-drop",
        ),
    ],
)
def test_summary(reason: str, expected: str) -> None:
    assert expected == refusals.summary(reason)


async def test_judging_nodes_in_bulk_answers_what_evaluate_answers_per_node() -> None:
    """Nodes of three shapes, each with its own spec object, interleaved: every score and
    every refusal summary is the one `evaluate` gives that node alone, in node order."""
    fixtures = NODE_JSON.parent
    runtime = Runtime(OperatorSettings())
    states: dict[str, NodeState] = {}
    for number in range(9):
        shape = ("h100-nvswitch", "dgx1-v100", "pcie-8gpu")[number % 3]
        spec = Numatopology.model_validate_json((fixtures / f"{shape}.json").read_text()).spec
        node, state = f"n{number}", NodeState(spec)
        runtime.ledger.set_topology(node, spec)
        for filler_number in range(number % 4):
            filler = pod(f"f{number}-{filler_number}", 4, 2, PolicyName.BEST_EFFORT)
            booked = allocate(spec, state, filler, node).assignment
            state.apply(filler.key, booked)
            runtime.ledger.reserve(node, filler.key, booked)
        states[node] = state
    request = pod("probe", 8, 4, PolicyName.SINGLE_NUMA_NODE)
    expected: tuple[dict[str, int], dict[str, str]] = ({}, {})
    ranks: dict[str, float] = {}
    for node, state in states.items():
        try:
            evaluate(state.topology, state, request)
        except UnsatisfiableError as exc:
            expected[1][node] = refusals.summary(exc.reason)
        else:
            ranks[node] = float(score_many(state.topology, [state], request).rank[0])
    expected[0].update(extender_scores(ranks))

    verdicts = await judge_off_loop(runtime, request, list(states))

    actual = (verdicts.scores, verdicts.failed)
    assert expected == actual
    assert list(expected[1]) == list(verdicts.failed)
