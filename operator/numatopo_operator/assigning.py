"""Deciding and writing: pod -> engine -> ledger reservation -> annotations -> Event (I/O).

Two callers share it: the assigner (a pod some scheduler already bound) and the
extender's bind (a pod our scheduler profile is binding now). Engine errors stop here
and become outcomes:
  InvalidRequestError  -> `numatopo.io/state: Invalid` + Warning Event with the message
  UnsatisfiableError   -> `numatopo.io/state: Unsatisfiable` + Warning Event with the
                          engine's reason (what did not fit on which NUMA node)
  a Decision           -> `numatopo.io/assignment` + `state: Assigned` + Normal Event
An outcome equal to the pod's current state is not written again (no Event storms when
a waiting pod is retried after a release).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from numatopo_engine import allocation, pod_request
from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment, State
from numatopo_engine.errors import InvalidRequestError, UnsatisfiableError
from numatopo_engine.request import PodRequest
from numatopo_operator import translate
from numatopo_operator.errors import KubeError
from numatopo_operator.runtime import Runtime
from numatopo_operator.translate import RawPod

__all__ = ["Outcome", "assign_bound_pod", "bind_pod", "decide", "mark_invalid", "pod_ref"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What was decided for one pod on one node."""

    state: State
    message: str
    assignment: Assignment | None = None

    @property
    def reason(self) -> str:
        return {
            State.ASSIGNED: translate.ASSIGNED,
            State.UNSATISFIABLE: translate.UNSATISFIABLE,
            State.INVALID: translate.INVALID,
        }[self.state]


def _current_state(pod: RawPod) -> str | None:
    found = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.STATE)
    return found if isinstance(found, str) else None


def pod_ref(pod: RawPod) -> dict[str, str]:
    metadata = pod.get("metadata") or {}
    return {
        "namespace": str(metadata.get("namespace") or "default"),
        "name": str(metadata.get("name", "")),
        "uid": str(metadata.get("uid", "")),
    }


def read_request(runtime: Runtime, pod: RawPod) -> PodRequest:
    """The engine's view of the pod; raises `InvalidRequestError`."""
    return pod_request.request_from_pod(pod, runtime.settings.resources)


async def decide(runtime: Runtime, request: PodRequest, node: str, *, path: str) -> Outcome | None:
    """Run the engine for `request` on `node` and reserve the result in the ledger.

    None when `node` has no Numatopology (nothing can be decided there yet). Serialised
    per node; an `Assigned` outcome is booked in-flight until its annotation is seen.
    """
    ledger = runtime.ledger
    async with ledger.lock(node):
        topology, state = ledger.topology(node), ledger.state(node)
        if topology is None or state is None:
            return None
        started = time.perf_counter()
        try:
            decision = allocation.allocate(topology, state, request, node)
        except InvalidRequestError as exc:
            outcome = Outcome(State.INVALID, translate.invalid_message(exc))
        except UnsatisfiableError as exc:
            outcome = Outcome(
                State.UNSATISFIABLE, translate.unsatisfiable_message(node, exc.reason)
            )
        else:
            ledger.reserve(node, request.key, decision.assignment)
            outcome = Outcome(
                State.ASSIGNED, translate.assigned_message(decision.assignment), decision.assignment
            )
        runtime.metrics.latency.labels(path).observe(time.perf_counter() - started)
    return outcome


async def _write(runtime: Runtime, pod: RawPod, outcome: Outcome, *, key: str) -> None:
    """Patch the pod's annotations, then post the Event. A failed patch frees the booking.

    Two retries of one pod may decide concurrently; only the first writes a state.
    """
    if runtime.written.get(key) == outcome.state:
        return
    runtime.written[key] = outcome.state
    ref = pod_ref(pod)
    try:
        await runtime.kube.patch_pod_annotations(
            ref["namespace"],
            ref["name"],
            translate.outcome_annotations(outcome.state, outcome.assignment),
        )
    except KubeError:
        runtime.written.pop(key, None)
        runtime.ledger.cancel(key)
        raise
    _count(runtime, outcome)
    await runtime.kube.post_event(
        ref, warning=outcome.state != State.ASSIGNED, reason=outcome.reason, message=outcome.message
    )


def _count(runtime: Runtime, outcome: Outcome) -> None:
    runtime.metrics.decisions.labels(outcome.state.value.lower()).inc()
    if outcome.state == State.UNSATISFIABLE:
        runtime.metrics.unsatisfiable.inc()
    elif outcome.state == State.INVALID:
        runtime.metrics.invalid.inc()
    runtime.metrics.ledger_pods.set(len(runtime.ledger))


async def assign_bound_pod(runtime: Runtime, pod: RawPod) -> State | None:
    """Decide for a pod already bound to its node; returns the state written (None: nothing).

    Skips pods the ledger already books (a decision in flight) and nodes without a
    Numatopology (logged; the pod is retried when the Numatopology appears).
    """
    key, node = translate.pod_key(pod), translate.pod_node(pod)
    if node is None or not translate.is_waiting(pod) or runtime.ledger.holds(key):
        return None
    current = runtime.written.get(key) or _current_state(pod)
    try:
        request = read_request(runtime, pod)
    except InvalidRequestError as exc:
        outcome: Outcome | None = Outcome(State.INVALID, translate.invalid_message(exc))
    else:
        outcome = await decide(runtime, request, node, path="assigner")
    if outcome is None:
        logger.info(
            "pod %s waits: no Numatopology for node %s yet (is the numatopo exporter running "
            "there?); it is retried when one appears",
            key,
            node,
        )
        return None
    if outcome.state == current:
        return None
    logger.info("pod %s on %s: %s: %s", key, node, outcome.state, outcome.message)
    await _write(runtime, pod, outcome, key=key)
    return outcome.state


async def mark_invalid(runtime: Runtime, pod: RawPod, why: str) -> None:
    """`state: Invalid` for a pod whose own assignment annotation cannot be used (kept as
    the user wrote it, booked nowhere); written once."""
    key = translate.pod_key(pod)
    if (runtime.written.get(key) or _current_state(pod)) == State.INVALID:
        return
    runtime.written[key] = State.INVALID
    ref = pod_ref(pod)
    await runtime.kube.patch_pod_annotations(
        ref["namespace"], ref["name"], {keys.STATE: State.INVALID.value}
    )
    _count(runtime, Outcome(State.INVALID, why))
    await runtime.kube.post_event(ref, warning=True, reason=translate.INVALID, message=why)


async def bind_pod(runtime: Runtime, pod: RawPod, node: str) -> str:
    """The extender's bind: assignment first, then the Binding; '' or the error text.

    If the Binding fails, the assignment is removed again, so no pod ever holds an
    assignment for a node it does not run on.
    """
    key = translate.pod_key(pod)
    ref = pod_ref(pod)
    held_on = runtime.ledger.node_of(key)
    if held_on is not None and held_on != node:
        runtime.ledger.forget(key)  # a stale attempt for another node: never ran there
    outcome: Outcome | None = None
    if translate.is_waiting({**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}}) and (
        held_on != node
    ):
        try:
            request = read_request(runtime, pod)
        except InvalidRequestError as exc:
            _count(runtime, Outcome(State.INVALID, ""))
            return translate.invalid_message(exc)
        outcome = await decide(runtime, request, node, path="bind")
        if outcome is None:
            return f"no Numatopology for node {node}"
        if outcome.state != State.ASSIGNED:
            _count(runtime, outcome)
            return outcome.message
        await _write(runtime, pod, outcome, key=key)
    try:
        await runtime.kube.create_binding(ref["namespace"], ref["name"], ref["uid"], node)
    except KubeError as exc:
        runtime.metrics.decisions.labels("bind_failed").inc()
        if outcome is not None:
            runtime.ledger.cancel(key)
            await runtime.kube.patch_pod_annotations(
                ref["namespace"], ref["name"], translate.removal_annotations()
            )
        await runtime.kube.post_event(
            ref,
            warning=True,
            reason=translate.BIND_FAILED,
            message=f"binding to {node} failed: {exc}",
        )
        return f"binding {key} to {node} failed: {exc}"
    return ""
