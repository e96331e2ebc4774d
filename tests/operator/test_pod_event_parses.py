"""One pod event is read once: its `numatopo.io/assignment` is parsed at the boundary
(`pod_view.PodView`) and every part of the operator that looks at the pod (the ledger's
booking, the admission check, realignment, the group placer, the decision) reads that.

The event goes through `handlers.pod_seen` as `pod_feed` hands it over, and the work
left for the pod's worker runs too, against the emulator.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import signing_keys
from numatopo_engine import annotations as keys
from numatopo_engine import pod_request
from numatopo_engine.annotations import Assignment, Observed
from numatopo_engine.resources import DEFAULT_RESOURCES
from numatopo_kube import KubeClient
from numatopo_operator import handlers
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

from .conftest import h100_spec, make_pod

logger = logging.getLogger(__name__)

ASSIGNMENT = json.dumps(
    {"v": 1, "node": "h100-a", "numaNodes": [0], "seq": 1,
     "containers": {"main": {"cpus": "2-5", "gpuIndices": [1]}}}
)  # fmt: skip
OBSERVED = json.dumps({"v": 1, "seq": 1, "containers": {"main": {"matches": True}}})


def counting(monkeypatch: pytest.MonkeyPatch, model: Any) -> list[str]:
    """Every `model.model_validate_json` call from now on, by its text."""
    seen: list[str] = []
    parse = model.model_validate_json

    def counted(cls: Any, text: str | bytes, **kwargs: Any) -> Any:
        seen.append(str(text))
        return parse(text, **kwargs)

    monkeypatch.setattr(model, "model_validate_json", classmethod(counted))
    return seen


def deciding_runtime(cluster: Any) -> Runtime:
    runtime = Runtime(
        OperatorSettings(),
        kube=KubeClient.connect(str(cluster.api.url)),
        signer=signing_keys.SIGNER,
        verifier=signing_keys.VERIFIER,
    )
    for flag in (runtime.indexed, runtime.active, runtime.ledger_current, runtime.role_known):
        flag.set()
    runtime.ledger.set_topology("h100-a", h100_spec())
    return runtime


async def handled(runtime: Any, kind: str, body: dict[str, Any]) -> None:
    """`body`'s event through `handlers.pod_seen` and its follow-up, as `pod_feed` runs
    them; the runtime's client closed after."""
    try:
        follow_up = handlers.pod_seen(runtime, kind, body, logger)
        assert follow_up is not None
        await follow_up()
    finally:
        await runtime.kube.close()


@pytest.mark.parametrize(
    "status",
    [
        pytest.param({"phase": "Pending"}, id="assigned-not-yet-admitted"),
        pytest.param({"phase": "Running", "startTime": "2024-05-01T10:00:01Z"}, id="running"),
    ],
)
async def test_one_pod_event_parses_its_assignment_once(cluster, monkeypatch, status):
    runtime = deciding_runtime(cluster)
    body = make_pod("p", gpus=1, annotations={keys.ASSIGNMENT: ASSIGNMENT, keys.OBSERVED: OBSERVED})
    body["status"] = status
    assignments = counting(monkeypatch, Assignment)
    observed = counting(monkeypatch, Observed)
    await handled(runtime, "MODIFIED", body)

    assert runtime.ledger.booking("default/p") is not None  # booked: the event was read
    assert 1 == len(assignments), assignments
    assert len(observed) <= 1, observed


async def test_a_new_pod_event_reads_its_request_once(cluster, monkeypatch):
    """A waiting GPU pod is read by the workload mix (its shape) and by the decision:
    one reading of its containers' resources serves both (`PodView.request`)."""
    runtime = deciding_runtime(cluster)
    body = make_pod("p", gpus=1)
    await cluster.create_pod(body)
    readings: list[str] = []
    read = pod_request.request_from_pod

    def counted(pod: Any, resources: Any = DEFAULT_RESOURCES) -> Any:
        readings.append(str(pod["metadata"]["name"]))
        return read(pod, resources)

    monkeypatch.setattr(pod_request, "request_from_pod", counted)
    await handled(runtime, "ADDED", body)

    assert cluster.annotations("p")[keys.STATE] == "Assigned"  # read, then decided
    assert runtime.workload.mix().shapes  # ...and counted in the mix
    assert ["p"] == readings
