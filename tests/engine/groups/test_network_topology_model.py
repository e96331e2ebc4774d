"""The NetworkTopology wire models: levels, validation, the wire shape."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from numatopo_engine.network_topology import NetworkTopology, NetworkTopologySpec

AWS = [
    {"nodeLabel": "topology.k8s.aws/network-node-layer-1"},
    {"nodeLabel": "topology.k8s.aws/network-node-layer-2"},
    {"nodeLabel": "topology.k8s.aws/network-node-layer-3"},
    {"nodeLabel": "kubernetes.io/hostname"},
]


def test_round_trip_on_the_wire() -> None:
    wire = {
        "apiVersion": "numatopo.io/v1alpha1",
        "kind": "NetworkTopology",
        "metadata": {"name": "default"},
        "spec": {"levels": AWS},
        "status": {
            "domains": [{"level": "topology.k8s.aws/network-node-layer-3", "count": 4}],
            "freeGPUs": 24,
            "largestFreeDomain": {
                "level": "topology.k8s.aws/network-node-layer-3",
                "value": "nn-3",
                "freeGPUs": 16,
            },
        },
    }
    topology = NetworkTopology.model_validate(wire)
    assert topology.spec.labels[0] == "topology.k8s.aws/network-node-layer-1"
    assert topology.to_wire()["status"] == {**wire["status"], "conditions": []}
    assert topology.to_wire()["spec"] == wire["spec"]


@pytest.mark.parametrize(
    ("levels", "words"),
    [
        ([], "at least 1"),
        ([{"nodeLabel": "a/b"}, {"nodeLabel": "a/b"}], "listed twice"),
        ([{"nodeLabel": "not a label"}], "not a Kubernetes label key"),
        ([{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}], "last"),
        ([{"node_label": "x", "extra": 1}], "extra"),
    ],
)
def test_bad_levels(levels: list[dict[str, object]], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        NetworkTopologySpec.model_validate({"levels": levels})
