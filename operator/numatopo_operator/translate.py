"""Pod manifests <-> engine values, annotation patches and Event texts (pure, no I/O).

Pods are read through their `PodView` (one per event, each annotation parsed once). A
`RawPod` is a Pod's JSON as the API (or kopf's `Body`) gives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment, Observed, State
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.signing import PodIdentity, Verifier
from numatopo_operator.errors import BookingError
from numatopo_operator.pod_view import PodView

# The extender's word for a candidate without a Numatopology. Per-node messages never name
# the node: kube-scheduler's "0/N nodes are available: ..." counts nodes per distinct
# message, and a name in each would list thousands of them in the pod's Event.
NO_NUMATOPOLOGY = "no Numatopology for the node (is the numatopo exporter running there?)"

RawPod = Mapping[str, Any]

# Event reasons, one per outcome a person may need to act on.
ASSIGNED = "NumatopoAssigned"
UNSATISFIABLE = "NumatopoUnsatisfiable"
INVALID = "NumatopoInvalid"
UNTRUSTED = "NumatopoUntrusted"
BIND_FAILED = "NumatopoBindFailed"


@dataclass(frozen=True, slots=True)
class Booking:
    """A pod's assignment as observed on the pod: what the ledger books on `node`."""

    key: str
    node: str
    assignment: Assignment
    uid: str = ""  # tells a pod from a later one of the same name (ledger resyncs, overlaps)
    admitted: bool = False  # the kubelet has admitted it: its devices are given (`is_admitted`)
    observed: Observed | None = None
    """What the node agent saw the kubelet give it (`numatopo.io/observed`), if readable."""


def pod_node(pod: RawPod) -> str | None:
    """The node the pod is bound to, or None while it is pending."""
    return PodView.of(pod).node


def is_finished(pod: RawPod) -> bool:
    """True once every container has stopped for good: its CPUs and GPUs are free again."""
    return PodView.of(pod).finished


def is_admitted(pod: RawPod) -> bool:
    """Whether the kubelet has admitted the pod (its devices are given): it reported on the
    pod (only after admission: start time, container statuses, a phase past Pending), or
    the agent observed the current assignment. An event without an assignment says
    nothing: it may predate our write (a pod whose decision is taken back frees its slot)."""
    view = PodView.of(pod)
    status = view.status
    if status.get("startTime") or status.get("containerStatuses"):
        return True
    if status.get("phase") not in (None, "Pending"):
        return True
    seen, assignment = view.observed, view.assignment
    return seen is not None and assignment is not None and seen.seq == assignment.seq


def state_of(pod: RawPod) -> str | None:
    """The pod's `numatopo.io/state`, None when it has none."""
    found = PodView.of(pod).annotations.get(keys.STATE)
    return found if isinstance(found, str) else None


def reason_of(pod: RawPod) -> str:
    """The pod's `numatopo.io/reason` ('' when it has none)."""
    found = PodView.of(pod).annotations.get(keys.REASON)
    return found if isinstance(found, str) else ""


def is_annotated(pod: RawPod) -> bool:
    """Whether the pod carries any numatopo annotation: one a new holder judges."""
    annotations = PodView.of(pod).annotations
    return any(key in annotations for key in (keys.POLICY, keys.ASSIGNMENT, keys.STATE))


def is_waiting(pod: RawPod) -> bool:
    """A running pod that asks for a policy and has no assignment yet; `Invalid` pods are
    not waiting (a person fixes them), unless they have no reason yet (a replica died in
    between, or an older version wrote it only as an Event): judged again to get one."""
    view = PodView.of(pod)
    annotations = view.annotations
    return (
        keys.POLICY in annotations
        and keys.ASSIGNMENT not in annotations
        and (annotations.get(keys.STATE) != State.INVALID or not reason_of(view))
        and view.node is not None
        and not view.ended
    )


def booking_from_pod(pod: RawPod, verifier: Verifier) -> Booking | None:
    """The pod's booking, None without an assignment or once finished. `BookingError` when
    the annotation is no valid assignment, names another node, or is not signed for this pod
    by the operator (`verifier`): a copied or hand-written one is no claim, whatever its seq."""
    view = PodView.of(pod)
    if view.finished:
        return None
    found = view.assignment_read
    if found is None:
        return None
    key = view.key
    if isinstance(found, str):
        raise BookingError(f"{key}: {found}")
    node = view.node
    if node is not None and node != found.node:
        raise BookingError(
            f"{key}: {keys.ASSIGNMENT} is for node {found.node!r}, but the pod runs on {node!r}"
        )
    unsigned = verifier.problem(found, PodIdentity(view.uid, key))
    if unsigned:
        raise BookingError(
            f"{key}: {keys.ASSIGNMENT} books nothing: {unsigned}; remove it (and "
            f"{keys.STATE}) and let numatopo assign the pod"
        )
    return Booking(key, found.node, found, view.uid, is_admitted(view), view.observed)


def outcome_annotations(
    state: State, assignment: Assignment | None = None, reason: str = ""
) -> dict[str, str | None]:
    """A decision's annotation merge patch (None removes a stale assignment), state and
    reason in one; only a signed assignment is written (an unsigned one is enforced nowhere)."""
    if assignment is not None and assignment.sig is None:
        raise ValueError("an assignment is written only signed (Runtime.signed)")
    return {
        keys.STATE: state.value,
        keys.ASSIGNMENT: assignment.to_annotation() if assignment is not None else None,
        keys.REASON: reason or None,
    }


def invalid_annotations(reason: str) -> dict[str, str | None]:
    """`Invalid` with its reason; the pod's own assignment stays as written (books nothing)."""
    return {keys.STATE: State.INVALID.value, keys.REASON: reason}


def removal_annotations() -> dict[str, str | None]:
    """The merge-patch that takes a decision back (a Binding that failed after it)."""
    return {keys.STATE: None, keys.ASSIGNMENT: None, keys.REASON: None}


def _ids(values: list[int] | list[str]) -> str:
    return ",".join(str(v) for v in values)


def assigned_message(assignment: Assignment) -> str:
    """One line per container: what it got, where. Example:
    `NUMA 0 on node-a (single-numa-node): train: CPUs 2-17, GPUs 0,1, NICs mlx5_0`."""
    numa = ",".join(str(n) for n in assignment.numa_nodes) or "-"
    parts = []
    for name, container in sorted(assignment.containers.items()):
        got = []
        if len(container.cpus):
            got.append(f"CPUs {container.cpus}" + ("" if container.exclusive else " (shared)"))
        if container.gpu_indices:
            got.append(f"GPUs {_ids(container.gpu_indices)}")
        if container.mig_indices:
            got.append(f"MIG devices {_ids(container.mig_indices)}")
        if container.nics:
            got.append(f"NICs {_ids(container.nics)}")
        if len(container.mems):
            got.append(f"memory NUMA {container.mems}")
        parts.append(f"{name}: " + (", ".join(got) or "nothing placed"))
    return f"NUMA {numa} on {assignment.node} ({assignment.policy}): " + "; ".join(parts)


def invalid_message(error: InvalidRequestError) -> str:
    return (
        f"invalid topology request: {error} "
        f"(fix it, then remove the {keys.STATE} annotation for a fresh decision)"
    )
