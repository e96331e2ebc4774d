"""The order in which a new holder judges the annotated pods (`handover.judging_order`)."""

from __future__ import annotations

from numatopo_engine import annotations as keys
from numatopo_operator.handover import judging_order

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
