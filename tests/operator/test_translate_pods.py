"""Pure translation: pods to bookings and states, Event texts, settings from the environment."""

from __future__ import annotations

import argparse
import json

import pytest

import signing_keys
from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment, ContainerAssignment, State
from numatopo_engine.cpuset import CPUSet
from numatopo_operator import settings, translate
from numatopo_operator.errors import BookingError

ASSIGNMENT = json.dumps(
    {"v": 1, "node": "h100-a", "numaNodes": [0], "containers": {"main": {"gpuIndices": [1]}}}
)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({}, True, id="bound-with-policy-and-no-state"),
        pytest.param({"node": None}, False, id="pending-is-not-waiting"),
        pytest.param({"policy": None}, False, id="no-policy-no-opt-in"),
        pytest.param(
            {"annotations": {keys.STATE: "Unsatisfiable"}}, True, id="unsatisfiable-waits-for-room"
        ),
        pytest.param(
            {"annotations": {keys.STATE: "Invalid", keys.REASON: "bad cpu"}},
            False,
            id="invalid-waits-for-a-person",
        ),
        pytest.param(
            {"annotations": {keys.STATE: "Invalid"}},
            True,
            id="invalid-without-a-reason-is-judged-again",
        ),
        pytest.param({"annotations": {keys.ASSIGNMENT: ASSIGNMENT}}, False, id="assigned-is-done"),
    ],
)
def test_is_waiting(pod, changes, expected):
    assert expected == translate.is_waiting(pod("p", **changes))


def test_finished_pod_is_not_waiting(pod):
    finished = pod("p")
    finished["status"]["phase"] = "Succeeded"

    assert (False, True) == (translate.is_waiting(finished), translate.is_finished(finished))


def test_booking_from_pod(pod):
    found = translate.booking_from_pod(
        pod("p", annotations={keys.ASSIGNMENT: ASSIGNMENT}), signing_keys.VERIFIER
    )

    assert ("default/p", "h100-a", [1]) == (
        found.key,
        found.node,
        found.assignment.containers["main"].gpu_indices,
    )


@pytest.mark.parametrize(
    ("value", "node", "message"),
    [
        pytest.param("{not json", "h100-a", "is not a valid assignment", id="not-json"),
        pytest.param(json.dumps({"v": 2, "node": "h100-a"}), "h100-a", "v: ", id="unknown-version"),
        pytest.param(
            ASSIGNMENT,
            "h100-b",
            "is for node 'h100-a', but the pod runs on 'h100-b'",
            id="other-node",
        ),
        pytest.param(
            "x" * 10_000, "h100-a", "(10000 characters)", id="ten-thousand-characters-shortened"
        ),
    ],
)
def test_unreadable_assignment(pod, value, node, message):
    with pytest.raises(BookingError, match=None) as caught:
        translate.booking_from_pod(
            pod("p", node=node, annotations={keys.ASSIGNMENT: value}), signing_keys.VERIFIER
        )

    assert message in str(caught.value)
    assert len(str(caught.value)) < 300


def test_outcome_annotations_remove_a_stale_assignment_and_carry_the_reason():
    """The state and its reason go in one patch (a crash between two writes would leave a
    refusal nobody can explain)."""
    assert {
        keys.STATE: "Unsatisfiable",
        keys.ASSIGNMENT: None,
        keys.REASON: "does not fit",
    } == translate.outcome_annotations(State.UNSATISFIABLE, reason="does not fit")


def test_assigned_message_names_what_each_container_got():
    assignment = Assignment(
        node="h100-a",
        numa_nodes=[1],
        containers={
            "train": ContainerAssignment(
                cpus=CPUSet.parse("52-55"), mems=CPUSet.parse("1"), gpu_indices=[4, 5]
            ),
            "sidecar": ContainerAssignment(cpus=CPUSet.parse("56-103"), exclusive=False),
        },
    )

    assert (
        "NUMA 1 on h100-a (none): sidecar: CPUs 56-103 (shared); "
        "train: CPUs 52-55, GPUs 4,5, memory NUMA 1"
    ) == translate.assigned_message(assignment)


def test_settings_from_env_then_flags():
    """Flags override the environment; comma lists become tuples."""
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    args = parser.parse_args(["--extender-port", "9999", "--lease-duration-seconds", "6"])
    environ = {
        "NUMATOPO_EXTENDER_PORT": "7777",
        "NUMATOPO_GPU_RESOURCES": "nvidia.com/gpu, amd.com/gpu",
        "NUMATOPO_LEASE_NAME": "numatopo",
        "NUMATOPO_POD_NAMESPACE": "numatopo-system",
        "NUMATOPO_HEARTBEAT_MAX_AGE_SECONDS": "120",
    }

    found = settings.from_args(args, environ)

    assert (9999, ("nvidia.com/gpu", "amd.com/gpu"), False, 6.0, "numatopo-system", 120.0) == (
        found.extender_port,
        found.gpu_resources,
        found.standalone,
        found.lease_duration_seconds,
        found.lease_namespace_or_default,
        found.heartbeat_max_age_seconds,
    )


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        pytest.param(
            {"NUMATOPO_EXTENDER_PORT": "http"},
            "'http' is not a port number",
            id="port-not-a-number",
        ),
        pytest.param(
            {"NUMATOPO_METRICS_PORT": "70000"}, "outside 0..65535", id="port-out-of-range"
        ),
        pytest.param(
            {"NUMATOPO_STATUS_DEBOUNCE_SECONDS": "-1"}, "outside 0..3600", id="negative-debounce"
        ),
        pytest.param(
            {"NUMATOPO_GPU_RESOURCES": " , "}, "at least one pattern", id="no-gpu-patterns"
        ),
        pytest.param(
            {"NUMATOPO_RENEW_DEADLINE_SECONDS": "5"},
            "renew deadline .5.0. < lease duration",
            id="renew-deadline-must-end-before-the-lease-does",
        ),
        pytest.param(
            {"NUMATOPO_RETRY_BASE_SECONDS": "60"}, "retry base", id="retry-base-above-max"
        ),
        pytest.param(
            {"NUMATOPO_SCHEDULER_NAME": ""},
            "scheduler profile's name is needed",
            id="no-scheduler-name-would-refuse-every-bind",
        ),
    ],
)
def test_bad_settings_say_what_is_wrong(environ, message):
    with pytest.raises(settings.SettingsError, match=message):
        settings.from_env(environ)


def _gpu_pod(annotations: dict[str, str], status: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "d", "annotations": annotations},
            "status": status}  # fmt: skip


@pytest.mark.parametrize(
    ("annotations", "status", "admitted"),
    [
        pytest.param({"numatopo.io/assignment": '{"v":1,"node":"n","seq":3}'},
                     {"phase": "Pending"}, False, id="assigned-not-yet-seen-by-the-kubelet"),
        pytest.param({"numatopo.io/assignment": '{"v":1,"node":"n","seq":3}'},
                     {"phase": "Pending", "startTime": "2024-01-01T00:00:00Z"}, True,
                     id="the-kubelet-reported-on-it"),
        pytest.param({"numatopo.io/assignment": '{"v":1,"node":"n","seq":3}',
                      "numatopo.io/observed": '{"v":1,"seq":3}'}, {"phase": "Pending"}, True,
                     id="the-agent-saw-its-devices"),
        pytest.param({"numatopo.io/assignment": '{"v":1,"node":"n","seq":3}',
                      "numatopo.io/observed": '{"v":1,"seq":2}'}, {"phase": "Pending"}, False,
                     id="devices-seen-for-an-older-decision"),
        pytest.param({}, {"phase": "Pending"}, False, id="no-assignment-says-nothing"),
        pytest.param({}, {"phase": "Running"}, True, id="running"),
    ],
)  # fmt: skip
def test_is_admitted(
    annotations: dict[str, str], status: dict[str, object], admitted: bool
) -> None:
    assert translate.is_admitted(_gpu_pod(annotations, status)) is admitted
