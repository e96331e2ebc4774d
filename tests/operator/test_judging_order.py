"""How a new holder judges the annotated pods: in what order (`handover.judging_order`),
and without holding the event loop for the whole pass (`handover.judge`)."""

from __future__ import annotations

import asyncio
import json

import pytest

from numatopo_engine import annotations as keys
from numatopo_operator import handover
from numatopo_operator.handover import judging_order
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime
from numatopo_operator.settings import OperatorSettings

from .conftest import make_pod


def aged(name: str, created: str, **annotations: str) -> dict:
    pod = make_pod(name, cpu="2")
    pod["metadata"]["creationTimestamp"] = created
    pod["metadata"]["annotations"].update(annotations)
    return pod


def test_new_waiting_pods_before_refused_ones_before_assigned_ones():
    refused = {keys.STATE: "Unsatisfiable", keys.REASON: "no room"}
    pods = [
        aged("assigned-old", "2024-01-01T00:00:00Z", **{keys.ASSIGNMENT: "{}"}),
        aged("refused-old", "2024-01-02T00:00:00Z", **refused),
        aged("refused-new", "2024-01-05T00:00:00Z", **refused),
        aged("new-late", "2024-01-04T00:00:00Z"),
        aged("new-early", "2024-01-03T00:00:00Z"),
    ]

    order = [pod["metadata"]["name"] for pod in sorted(pods, key=judging_order)]

    assert ["new-early", "new-late", "refused-old", "refused-new", "assigned-old"] == order


def assigned(name: str) -> PodView:
    """A pod with a readable assignment: judging it calls no API, so never suspends."""
    text = json.dumps(
        {"v": 1, "node": "h100-a", "numaNodes": [0], "seq": 1,
         "containers": {"main": {"cpus": "2-5"}}}
    )  # fmt: skip
    return PodView(make_pod(name, annotations={keys.ASSIGNMENT: text, keys.STATE: "Assigned"}))


async def test_judging_lets_the_event_loop_run_between_slices(monkeypatch: pytest.MonkeyPatch):
    """A takeover judges every annotated pod, 10,000 valid assignments at 1,000 nodes, none
    of which awaits anything: the pass used to hold the loop until its end (the pod watch,
    the Lease renewal, the extender, a pod that came just after the takeover all waited).
    With a slice of 0 it lets the loop run before each pod."""
    monkeypatch.setattr(handover, "JUDGE_SLICE_SECONDS", 0.0)
    runtime = Runtime(OperatorSettings())  # standalone: the Lease is always fresh
    for flag in (runtime.indexed, runtime.active, runtime.ledger_current, runtime.role_known):
        flag.set()
    pods = {view.key: view for view in (assigned(f"job-{i}") for i in range(50))}
    judging = asyncio.ensure_future(handover.judge(runtime, pods))
    ran_while_judging: list[bool] = []

    def other_work() -> None:
        ran_while_judging.append(not judging.done())
        if len(ran_while_judging) < 3:
            asyncio.get_running_loop().call_soon(other_work)

    asyncio.get_running_loop().call_soon(other_work)
    await judging

    assert [True, True, True] == ran_while_judging
