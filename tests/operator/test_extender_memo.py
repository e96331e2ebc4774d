"""What the extender keeps between calls for a pod (`extender_memo`): bounded, keyed by
the pod's whole content, and never a verdict (bookings that change are judged anew)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from numatopo_engine import annotations as keys
from numatopo_engine.allocation import allocate
from numatopo_engine.annotations import PolicyName
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.model import Numatopology
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.resources import DEFAULT_RESOURCES
from numatopo_engine.state import NodeState
from numatopo_operator.extender import filter_result, priorities
from numatopo_operator.extender_memo import CycleMemo
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

NODE_JSON = Path(__file__).resolve().parents[1] / "fixtures" / "topologies" / "h100-nvswitch.json"


def pod_object(uid: str, gpus: int, *, cpu: str = "4", version: str = "1") -> dict[str, Any]:
    """A Pod as kube-scheduler sends it to the extender."""
    resources = {"cpu": cpu, "memory": "8Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{uid}",
            "namespace": "ml",
            "uid": uid,
            "resourceVersion": version,
            "annotations": {keys.POLICY: "best-effort"},
        },
        "spec": {
            "containers": [
                {"name": "main", "resources": {"requests": resources, "limits": resources}}
            ]
        },
    }


def test_a_pod_is_parsed_once_per_content() -> None:
    memo = CycleMemo()
    pod = pod_object("u1", 2)
    first = memo.request(pod, DEFAULT_RESOURCES)
    assert memo.request(copy.deepcopy(pod), DEFAULT_RESOURCES) is first
    changed = pod_object("u1", 4, version="2")  # the same pod, resized
    request = memo.request(changed, DEFAULT_RESOURCES)
    assert request is not first
    assert request.containers[0].gpus == 4
    # A body that differs in any field, whatever its resourceVersion, is parsed again.
    same_version = pod_object("u1", 1, version="2")
    assert memo.request(same_version, DEFAULT_RESOURCES).containers[0].gpus == 1


def test_an_invalid_pod_is_refused_every_time() -> None:
    memo = CycleMemo()
    bad = pod_object("u1", 1, cpu="lots")
    for _ in range(2):
        with pytest.raises(InvalidRequestError):
            memo.request(bad, DEFAULT_RESOURCES)


def test_the_memo_keeps_at_most_its_size_in_pods() -> None:
    memo = CycleMemo(size=2)
    pods = [pod_object(f"u{i}", 1) for i in range(3)]
    parsed = [memo.request(pod, DEFAULT_RESOURCES) for pod in pods]
    for i in range(3):
        memo.keep_ranks(f"u{i}", {"a": float(i)}, {"a": 10})
    assert memo.request(pods[2], DEFAULT_RESOURCES) is parsed[2]
    assert memo.request(pods[0], DEFAULT_RESOURCES) is not parsed[0]  # dropped, parsed again
    assert memo.take_ranks("u0") == ({}, {})
    assert memo.take_ranks("u2") == ({"a": 2.0}, {"a": 10})
    assert memo.take_ranks("u2") == ({}, {})  # taken once


async def test_a_node_booked_between_two_cycles_is_judged_on_its_new_bookings() -> None:
    """The same pod, sent again after one of its nodes was booked full: filter and
    prioritize judge that node on its new bookings, not on what the pod met before."""
    spec = Numatopology.model_validate_json(NODE_JSON.read_text()).spec
    runtime = Runtime(OperatorSettings())
    for node in ("a", "b"):
        runtime.ledger.set_topology(node, spec)
    memo = CycleMemo()
    pod = pod_object("u1", 8)
    args = {"Pod": pod, "NodeNames": ["a", "b"]}

    before = await filter_result(runtime, args, memo)
    assert before["NodeNames"] == ["a", "b"]
    hosts, scores = await priorities(runtime, args, memo)
    assert hosts == ["a", "b"]
    assert min(scores) > 0

    filler = PodRequest(
        "ml", "filler", (ContainerRequest(name="main", cpu_milli=4000, gpus=8),),
        options=TopologyOptions(policy=PolicyName.BEST_EFFORT),
    )  # fmt: skip
    booked = allocate(spec, NodeState(spec), filler, "b").assignment
    runtime.ledger.reserve("b", filler.key, booked)

    after = await filter_result(runtime, args, memo)
    assert after["NodeNames"] == ["a"]
    assert set(after["FailedNodes"]) == {"b"}
    hosts, scores = await priorities(runtime, args, memo)
    assert dict(zip(hosts, scores, strict=True)) == {"a": 10, "b": 0}
