"""What the agent offers its steering plugin as GPU claims in flight: only the operator's
current decision for a pod on this node. A signed assignment for another node (a bind
that failed there, written back) or an older decision of the pod shown again after a
newer one would steer the kubelet to GPUs the operator may have booked for another pod."""

from __future__ import annotations

import json
from typing import Any

import signing_keys
from numatopo_engine.cpuset import CPUSet
from numatopo_exporter.agent.planning import Cpuset
from numatopo_exporter.agent.pod_records import PodRecords
from numatopo_exporter.agent.pod_view import PodView
from numatopo_exporter.agent.pods import select_assignments

from ..daemon.conftest import NODE

GPU = "nvidia.com/gpu"


def pending(annotation: dict[str, Any]) -> dict[str, Any]:
    """A pod on this node that the kubelet has not admitted yet, asking for one GPU, with
    `annotation` signed for it."""
    body: dict[str, Any] = {
        "metadata": {
            "name": "train", "namespace": "default", "uid": "uid-train",
            "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": {},
        },
        "spec": {"nodeName": NODE,
                 "containers": [{"name": "main", "resources": {"limits": {GPU: "1"}}}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip
    body["metadata"]["annotations"]["numatopo.io/assignment"] = signing_keys.signed_annotation(
        body, json.dumps(annotation)
    )
    return body


def gpu_claim(*, node: str, seq: int, gpu: int) -> dict[str, Any]:
    return {"v": 1, "node": node, "seq": seq,
            "containers": {"main": {"gpus": [f"GPU-{gpu}"], "gpuIndices": [gpu]}}}  # fmt: skip


def records() -> PodRecords:
    return PodRecords(NODE, lambda: 0.0, lambda name: name == GPU, signing_keys.VERIFIER)


def test_the_current_decision_on_this_node_is_steered_to() -> None:
    found = records()
    found.take(PodView.of(pending(gpu_claim(node=NODE, seq=1, gpu=3))))

    assert [("default/train", ("GPU-3",))] == [(c.pod_key, c.gpus) for c in found.in_flight]


def test_a_signed_assignment_for_another_node_steers_nothing() -> None:
    found = records()
    found.take(PodView.of(pending(gpu_claim(node="elsewhere", seq=1, gpu=3))))

    assert () == found.in_flight


def test_an_older_decision_shown_again_steers_nothing() -> None:
    found = records()
    online = Cpuset(CPUSet.parse("0-3"), CPUSet([0]))
    for seq, gpu in ((1, 3), (2, 1)):
        found.take(PodView.of(pending(gpu_claim(node=NODE, seq=seq, gpu=gpu))))
        select_assignments(
            found.views(), node_name=NODE, online=online, verifier=signing_keys.VERIFIER,
            newest=found.newest_seqs,
        )  # fmt: skip
    assert [("GPU-1",)] == [c.gpus for c in found.in_flight]

    found.take(PodView.of(pending(gpu_claim(node=NODE, seq=1, gpu=3))))

    assert () == found.in_flight


def test_a_pod_whose_gpus_dra_serves_steers_nothing() -> None:
    """kube-scheduler's claim serves the pod's `nvidia.com/gpu` (a node where DRA serves
    the name, KEP-5004): no device plugin gives it GPUs, so a device-plugin pod's request
    steered by its entry would get the claimed GPU."""
    body = pending(gpu_claim(node=NODE, seq=1, gpu=3))
    mapping = {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"}
    body["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "train-extended-resources-x7k2q",
        "requestMappings": [mapping],
    }
    found = records()
    found.take(PodView.of(body))

    assert () == found.in_flight
