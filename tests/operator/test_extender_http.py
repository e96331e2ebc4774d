"""The scheduler extender over real HTTP, with the JSON kube-scheduler sends and expects."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from extender_scores import extender_scores
from numatopo_engine import annotations as keys
from numatopo_operator.extender import (
    filter_body,
    priorities_body,
    rank_scores,
)
from numatopo_operator.extender_wire import HostPriority, HostPriorityRow

FRESH, STALE, MISSING = "h100-a", "h100-stale", "h100-missing"


@pytest.fixture
async def extender(cluster, start_operator, h100, topology_object, wait):
    await cluster.create_numatopology(topology_object(FRESH, h100))
    await cluster.create_numatopology(topology_object(STALE, h100, exported="False"))
    await cluster.create_node(FRESH)
    running = await start_operator()
    await wait(running.runtime.indexed.is_set, what="operator listed everything")
    await wait(lambda: STALE in running.runtime.ledger.stale_nodes(0), what="stale node seen")
    return running


def args(pod: dict, names: list[str]) -> dict:
    """ExtenderArgs as a node-cache-capable kube-scheduler marshals it."""
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


async def test_filter_keeps_fitting_nodes_and_says_why_per_node(extender, pod):
    status, result = await extender.post(
        "/filter", args(pod("job", node=None, gpus=4), [FRESH, STALE, MISSING])
    )

    assert 200 == status
    assert ["Error", "FailedAndUnresolvableNodes", "FailedNodes", "NodeNames", "Nodes"] == sorted(
        result
    )
    assert [FRESH] == result["NodeNames"]
    assert None is result["Nodes"]
    assert {} == result["FailedNodes"]
    assert [MISSING, STALE] == sorted(result["FailedAndUnresolvableNodes"])
    assert (
        "no Numatopology for the node (is the numatopo exporter running there?)"
        == result["FailedAndUnresolvableNodes"][MISSING]
    )
    assert "stale (Exported=False" in result["FailedAndUnresolvableNodes"][STALE]
    assert "" == result["Error"]


async def test_filter_reports_what_did_not_fit(extender, pod):
    """The message leaves the node's name out (it is the key), so kube-scheduler can count
    nodes per identical reason instead of listing one reason per node."""
    status, result = await extender.post("/filter", args(pod("huge", node=None, gpus=6), [FRESH]))

    assert 200 == status
    assert [] == result["NodeNames"]
    assert [FRESH] == list(result["FailedNodes"])
    assert "GPUs" in result["FailedNodes"][FRESH]
    assert FRESH not in result["FailedNodes"][FRESH]


async def test_filter_with_node_objects_answers_with_node_objects(extender, pod):
    """A scheduler that is not node-cache-capable sends Node objects and gets the kept ones back."""
    nodes = {"items": [{"metadata": {"name": FRESH}}, {"metadata": {"name": MISSING}}]}
    status, result = await extender.post(
        "/filter", {"Pod": pod("job", node=None, gpus=1), "Nodes": nodes}
    )

    assert 200 == status
    assert [{"metadata": {"name": FRESH}}] == result["Nodes"]["items"]
    assert None is result["NodeNames"]


@pytest.mark.parametrize(
    ("annotations", "passed"),
    [
        pytest.param(None, [FRESH, MISSING], id="pod-without-policy-passes-everywhere"),
        pytest.param({keys.POLICY: "sometimes"}, [], id="invalid-policy-passes-nowhere"),
    ],
)
async def test_filter_without_a_valid_policy(extender, pod, annotations, passed):
    manifest = pod("job", node=None, policy=None, annotations=annotations)

    _, result = await extender.post("/filter", args(manifest, [FRESH, MISSING]))

    assert passed == result["NodeNames"]


async def test_filter_rejects_a_body_that_is_not_extender_args(extender):
    status, result = await extender.post("/filter", {"NodeNames": [FRESH]})

    assert 200 == status
    assert "ExtenderArgs has no Pod object" == result["Error"]


async def test_prioritize_gives_every_candidate_a_score_out_of_ten(extender, pod):
    status, result = await extender.post(
        "/prioritize", args(pod("job", node=None, gpus=2), [FRESH, MISSING])
    )

    assert 200 == status
    assert [FRESH, MISSING] == [entry["Host"] for entry in result]
    assert ["Host", "Score"] == sorted(result[0])
    assert 0 < result[0]["Score"] <= 10
    assert 0 == result[1]["Score"]


@pytest.mark.parametrize(
    ("ranks", "scores"),
    [
        pytest.param({}, {}, id="nothing-fits"),
        pytest.param({"a": 100.7, "b": 100.2}, {"a": 10, "b": 9}, id="best-is-max-priority"),
        pytest.param({"a": 50.0, "b": 50.0}, {"a": 10, "b": 10}, id="equal-ranks-equal-scores"),
        pytest.param(
            {f"n{i}": float(i) for i in range(12)},
            {f"n{i}": max(1, i - 1) for i in range(12)},
            id="order-floors-at-one",
        ),
    ],
)
def test_extender_scores_are_the_order_of_the_ranks(ranks, scores):
    assert scores == extender_scores(ranks)


async def test_bind_writes_the_assignment_then_the_binding(extender, cluster, pod, wait):
    bindings = cluster.emulate_binding()
    manifest = pod("job", node=None, gpus=2)
    await cluster.create_pod(manifest)
    body = {
        "PodName": "job",
        "PodNamespace": "default",
        "PodUID": manifest["metadata"]["uid"],
        "Node": FRESH,
    }

    status, result = await extender.post("/bind", body)

    assert (200, {"Error": ""}) == (status, result)
    assert [
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "job", "namespace": "default", "uid": manifest["metadata"]["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": FRESH},
        }
    ] == bindings
    annotations = cluster.annotations("job")
    assert "Assigned" == annotations[keys.STATE]
    assert FRESH == json.loads(annotations[keys.ASSIGNMENT])["node"]
    assert FRESH == cluster.pods()["job"]["spec"]["nodeName"]


async def test_failed_binding_takes_the_assignment_back(extender, cluster, pod, wait):
    cluster.emulate_binding(fail=True)
    await cluster.create_pod(pod("job", node=None, gpus=4))
    body = cluster.binding_args("job", FRESH)

    status, result = await extender.post("/bind", body)

    # The watch stream may still deliver the assignment written before the take-back
    # (the ledger then holds the GPUs a moment longer, which can never double-book);
    # what matters is that it ends up free.
    await wait(lambda: not extender.runtime.ledger.holds("default/job"), what="take-back seen")

    assert 200 == status
    assert "pod is already bound" in result["Error"]
    assert {keys.POLICY: "single-numa-node"} == cluster.annotations("job")
    assert 8 == len(extender.runtime.ledger.state(FRESH).free_gpus())


async def test_probes_and_metrics(extender, cluster, pod, wait):
    await cluster.create_pod(pod("placed", gpus=1))
    await cluster.create_pod(pod("invalid", annotations={keys.SMT: "half"}))
    # Each pod's own Event, not any two: under load the order of Events is not the order
    # of the pods (CI once saw two before the invalid pod was decided).
    await wait(
        lambda: bool(cluster.events_for("placed")) and bool(cluster.events_for("invalid")),
        what="both decisions",
    )

    healthz, readyz, (status, metrics) = (
        await extender.get("/healthz"),
        await extender.get("/readyz"),
        await extender.get("/metrics"),
    )

    assert (200, "ok\n") == healthz
    assert (200, "ok: active\n") == readyz
    assert 200 == status
    assert 'numatopo_decisions_total{result="assigned"} 1.0' in metrics
    assert 'numatopo_decisions_total{result="invalid"} 1.0' in metrics
    assert "numatopo_invalid_total 1.0" in metrics
    assert "numatopo_ledger_pods 1.0" in metrics
    assert 'numatopo_decision_seconds_count{path="assigner"} 1.0' in metrics


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=-1.0, max_value=200.0, allow_nan=False), max_size=40))
def test_array_scores_are_extender_scores(ranks):
    """prioritize scores with the array form (`rank_scores`): the same scores as the dict one."""
    named = {f"n{i}": rank for i, rank in enumerate(ranks)}
    got = rank_scores(np.array(ranks, dtype=np.float64)).tolist() if ranks else []
    assert dict(zip(named, got, strict=True)) == extender_scores(named)


_names = st.text(min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(_names, st.sampled_from(["Insufficient GPUs", 'q"uote\\', "é ✓", ""])),
    st.dictionaries(_names, st.text(max_size=20)),
    st.lists(_names, max_size=20),
    st.lists(st.tuples(_names, st.integers(0, 10)), max_size=30),
)
def test_answers_read_back_as_the_objects_they_write(failed, unresolvable, passed, hosts):
    """The extender writes its big answers with msgspec: Python's own parser reads back
    the same objects, keys in the same order."""
    result = {
        "Nodes": None,
        "NodeNames": passed,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }
    answer = [{"Host": host, "Score": score} for host, score in hosts]
    text = priorities_body([host for host, _ in hosts], [score for _, score in hosts])
    read = json.loads(filter_body(result))
    assert (read, json.loads(text)) == (result, answer)
    # The one definition of a HostPriority (`extender_wire`) reads the answer as written.
    rows = TypeAdapter(list[HostPriority]).validate_json(text)
    assert answer == [row.model_dump() for row in rows]
    assert [list(read), list(read["FailedNodes"])] == [list(result), list(failed)]


def test_an_answer_naming_a_lone_surrogate_is_still_json():
    """A name with a lone surrogate (only Python's parser lets one in) is written with
    the escape `json.dumps` writes, where msgspec's encoder cannot write it."""
    result = {"NodeNames": ["n\ud800"], "FailedNodes": {"m\udfff": "Insufficient GPUs"}}

    assert result == json.loads(filter_body(result))
    assert [{"Host": "n\ud800", "Score": 3}] == json.loads(priorities_body(["n\ud800"], [3]))


def test_the_written_host_priority_has_the_models_fields():
    """prioritize writes `HostPriorityRow`s, made from the pydantic model's fields."""
    assert HostPriorityRow.__struct_fields__ == tuple(HostPriority.model_fields)
    assert [{"Host": "n", "Score": 7}] == json.loads(priorities_body(["n"], [7]))
