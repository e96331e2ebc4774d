"""Group membership and rank read from pod metadata (`numatopo_engine.groups`)."""

from __future__ import annotations

from typing import Any

import pytest

from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.groups import GroupSpec, Strategy, group_of, rank_of
from numatopo_engine.pod_options import options_from_annotations
from numatopo_engine.request import ContainerRequest


def meta(annotations: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": "w-0", "namespace": "ml", "annotations": annotations or {}, **extra}


def test_not_a_group_member() -> None:
    assert group_of(meta()) is None
    assert group_of({"name": "p"}) is None


def test_full_group() -> None:
    spec = group_of(
        meta(
            {
                "numatopo.io/group": "train",
                "numatopo.io/group-size": " 16 ",
                "numatopo.io/topology-required": "topology.k8s.aws/network-node-layer-3",
                "numatopo.io/placement-strategy": "balanced",
                "numatopo.io/topology": "aws",
            }
        )
    )
    assert spec == GroupSpec(
        namespace="ml",
        name="train",
        size=16,
        required="topology.k8s.aws/network-node-layer-3",
        preferred=None,
        strategy=Strategy.BALANCED,
        topology="aws",
    )
    assert spec.key == "ml/train"


def test_defaults() -> None:
    spec = group_of(meta({"numatopo.io/group": "g", "numatopo.io/group-size": "2"}))
    assert spec is not None
    assert spec.strategy is Strategy.CONSOLIDATED
    assert (spec.required, spec.preferred, spec.topology) == (None, None, None)
    no_namespace = group_of(
        {"annotations": {"numatopo.io/group": "g", "numatopo.io/group-size": "2"}}
    )
    assert no_namespace is not None
    assert no_namespace.namespace == "default"


def test_coscheduling_label_with_min_available() -> None:
    spec = group_of(
        meta(
            {"scheduling.x-k8s.io/min-available": "4"},
            labels={"scheduling.x-k8s.io/pod-group": "pg"},
        )
    )
    assert spec is not None
    assert (spec.name, spec.size) == ("pg", 4)
    # numatopo's own size wins over min-available
    spec = group_of(
        meta(
            {"scheduling.x-k8s.io/min-available": "4", "numatopo.io/group-size": "8"},
            labels={"scheduling.x-k8s.io/pod-group": "pg"},
        )
    )
    assert spec is not None
    assert spec.size == 8


def test_annotation_name_wins_over_label() -> None:
    spec = group_of(
        meta(
            {"numatopo.io/group": "a", "numatopo.io/group-size": "1"},
            labels={"scheduling.x-k8s.io/pod-group": "b"},
        )
    )
    assert spec is not None
    assert spec.name == "a"


@pytest.mark.parametrize(
    ("annotations", "labels", "field", "words"),
    [
        ({"numatopo.io/group": "g"}, {}, "numatopo.io/group-size", "needs a size"),
        ({}, {"scheduling.x-k8s.io/pod-group": "g"}, "numatopo.io/group-size", "needs a size"),
        (
            {"numatopo.io/group": "g", "numatopo.io/group-size": "0"},
            {},
            "numatopo.io/group-size",
            "out of range",
        ),
        (
            {"numatopo.io/group": "g", "numatopo.io/group-size": "two"},
            {},
            "numatopo.io/group-size",
            "whole number",
        ),
        (
            {"numatopo.io/group": "g", "numatopo.io/group-size": "-1"},
            {},
            "numatopo.io/group-size",
            "whole number",
        ),
        (
            {"numatopo.io/group": "g", "numatopo.io/group-size": "9999999"},
            {},
            "numatopo.io/group-size",
            "whole number",
        ),
        (
            {"numatopo.io/group": "g", "numatopo.io/group-size": 3},
            {},
            "numatopo.io/group-size",
            "strings",
        ),
        (
            {"numatopo.io/group": "", "numatopo.io/group-size": "3"},
            {},
            "numatopo.io/group",
            "group name",
        ),
        (
            {"numatopo.io/group": "a b", "numatopo.io/group-size": "3"},
            {},
            "numatopo.io/group",
            "group name",
        ),
        (
            {
                "numatopo.io/group": "g",
                "numatopo.io/group-size": "2",
                "numatopo.io/placement-strategy": "consolidate",
            },
            {},
            "numatopo.io/placement-strategy",
            "did you mean 'consolidated'",
        ),
        (
            {
                "numatopo.io/group": "g",
                "numatopo.io/group-size": "2",
                "numatopo.io/topology-required": "not a label",
            },
            {},
            "numatopo.io/topology-required",
            "not a node label key",
        ),
        (
            {
                "numatopo.io/group": "g",
                "numatopo.io/group-size": "2",
                "numatopo.io/topology-preferred": "UPPER.case/x",
            },
            {},
            "numatopo.io/topology-preferred",
            "not a node label key",
        ),
        # A prefix the API server refuses in a label key (an empty DNS label).
        (
            {
                "numatopo.io/group": "g",
                "numatopo.io/group-size": "2",
                "numatopo.io/topology-preferred": "network..example/leaf",
            },
            {},
            "numatopo.io/topology-preferred",
            "not a node label key",
        ),
        (
            {
                "numatopo.io/group": "g",
                "numatopo.io/group-size": "2",
                "numatopo.io/topology-required": "rack",
                "numatopo.io/topology-preferred": "leaf",
            },
            {},
            "numatopo.io/topology-preferred",
            "one of the two",
        ),
        (
            {"numatopo.io/group-size": "2"},
            {},
            "numatopo.io/group-size",
            "without numatopo.io/group",
        ),
        ({"numatopo.io/topology-required": "rack"}, {}, "numatopo.io/topology-required", "without"),
        (
            {"numatopo.io/group": "g", "numatopo.io/group-size": "2", "numatopo.io/topology": ""},
            {},
            "numatopo.io/topology",
            "NetworkTopology name",
        ),
    ],
)
def test_bad_values_name_the_annotation(
    annotations: dict[str, Any], labels: dict[str, str], field: str, words: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        group_of(meta(annotations, labels=labels))
    assert caught.value.field == field
    assert words in caught.value.message


def test_labels_not_a_mapping() -> None:
    with pytest.raises(InvalidRequestError, match=r"metadata\.labels"):
        group_of(meta({}, labels=["x"]))


def test_rank_sources_in_order() -> None:
    job = "batch.kubernetes.io/job-completion-index"
    assert rank_of(meta({"numatopo.io/rank": "7", job: "3"})) == 7
    assert rank_of(meta({job: "3"}, labels={job: "4"})) == 3
    assert rank_of(meta({}, labels={job: "4", "apps.kubernetes.io/pod-index": "5"})) == 4
    assert rank_of(meta({}, labels={"apps.kubernetes.io/pod-index": "5"})) == 5


def test_statefulset_ordinal_only_for_statefulset_pods() -> None:
    owned = {"name": "worker-12", "ownerReferences": [{"kind": "StatefulSet", "name": "worker"}]}
    assert rank_of(owned) == 12
    assert rank_of({"name": "worker-12", "ownerReferences": [{"kind": "ReplicaSet"}]}) is None
    assert rank_of({"name": "worker-12"}) is None
    assert rank_of({"name": "worker", "ownerReferences": [{"kind": "StatefulSet"}]}) is None


@pytest.mark.parametrize("value", ["x", "-1", "1.5", ""])
def test_bad_rank_is_invalid(value: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        rank_of(meta({"numatopo.io/rank": value}))
    assert caught.value.field == "numatopo.io/rank"


def test_group_annotations_are_not_unknown_to_pod_options() -> None:
    container = ContainerRequest(name="c", cpu_milli=1000)
    raw = {
        "numatopo.io/group": "g",
        "numatopo.io/group-size": "2",
        "numatopo.io/rank": "1",
        "numatopo.io/placement-strategy": "balanced",
        "numatopo.io/group-placement": "{}",
    }
    options_from_annotations(raw, containers=[container])
    with pytest.raises(InvalidRequestError, match="unknown annotation"):
        options_from_annotations({"numatopo.io/grop": "g"}, containers=[container])


def test_max_members_per_domain() -> None:
    group = {"numatopo.io/group": "g", "numatopo.io/group-size": "8"}
    key = "numatopo.io/max-members-per-domain"
    spec = group_of(meta({**group, key: " example.com/leaf = 2 "}))
    assert spec is not None
    assert spec.most_per_domain == ("example.com/leaf", 2)
    hosts = group_of(meta({**group, key: "kubernetes.io/hostname=1"}))
    assert hosts is not None
    assert hosts.most_per_domain == ("kubernetes.io/hostname", 1)
    for bad, why in [
        ("4", "is not <level>=<n>"),
        ("not a key=2", "is not <level>=<n>"),
        ("example.com/leaf=0", "out of range"),
        ("example.com/leaf=two", "not a whole number"),
    ]:
        with pytest.raises(InvalidRequestError, match=why) as caught:
            group_of(meta({**group, key: bad}))
        assert caught.value.field == key
    with pytest.raises(InvalidRequestError, match="set without"):
        group_of(meta({key: "example.com/leaf=2"}))


def test_slices() -> None:
    group = {"numatopo.io/group": "g", "numatopo.io/group-size": "8"}
    spec = group_of(meta({**group, "numatopo.io/slice": "example.com/leaf=4"}))
    assert spec is not None
    assert spec.slice == ("example.com/leaf", 4)
    with pytest.raises(InvalidRequestError, match="slices of 3 do not divide the group's size 8"):
        group_of(meta({**group, "numatopo.io/slice": "example.com/leaf=3"}))
