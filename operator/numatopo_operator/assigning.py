"""Deciding and writing: pod -> engine -> ledger reservation -> annotations -> Event (I/O).

Two callers: the assigner (a pod some scheduler already bound) and the extender's bind (a
pod our scheduler profile is binding now). Engine errors become outcomes:
`InvalidRequestError` -> `state: Invalid`, `UnsatisfiableError` -> `state: Unsatisfiable`
(each with its `numatopo.io/reason` and a Warning Event), a decision ->
`numatopo.io/assignment` (with the node's next decision sequence), `state: Assigned` and a
Normal Event. State and reason go in one patch, so a replica killed after it leaves nothing
half-said; an outcome equal to the pod's current state (and reason) is not written again,
so a retried waiting pod makes no Event storm.

`judge_pod` is the one entry for "look at this pod": an unreadable or overlapping
assignment becomes `Invalid` (left as written, booking nothing), a waiting pod is decided.
`settle` adds the retry queue (`run_retries`). Every write is fenced
(`Runtime.check_may_write`): a replica that could not renew its Lease stops writing before
a standby may take over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from numatopo_engine.annotations import Assignment, State
from numatopo_engine.errors import InvalidRequestError, OverlapError, UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.relaxed_allocation import allocate_around
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState
from numatopo_operator import pod_writes, realigning, translate
from numatopo_operator.errors import KubeError, KubeNotFoundError, NodeBusyError, NotActiveError
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime

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


def _gated(runtime: Runtime, request: PodRequest, node: str) -> bool:
    """Whether the pod needs its steered node's GPU admission slot (`gpu_admissions`)."""
    wants_gpus = any(c.gpus for c in (*request.containers, *request.init_containers))
    return wants_gpus and runtime.steered(node)


# A decision takes up to half a second on a 64-NUMA node; the node's free resources
# changing under each of this many in a row would take a storm of pods ending there.
DECIDE_ATTEMPTS = 3


def held_outcome(runtime: Runtime, node: str, key: str) -> Outcome | None:
    """The pod's own booking on `node`, as an outcome; None when it holds none there."""
    state = runtime.ledger.state(node)
    if state is None or runtime.ledger.node_of(key) != node:
        return None
    held = state.assignments.get(key)
    if held is None:
        return None
    return Outcome(State.ASSIGNED, translate.assigned_message(held), held)


def book(
    runtime: Runtime, node: str, key: str, assignment: Assignment, *, over: Collection[str] = ()
) -> Outcome:
    """Book `assignment` in flight with the node's next sequence (under the node's lock);
    `NodeBusyError` when the node changed so that it no longer fits."""
    ledger = runtime.ledger
    try:
        assignment = assignment.model_copy(update={"seq": ledger.next_seq(node)})
        ledger.reserve(node, key, assignment, over=over)
    except (KeyError, OverlapError) as exc:
        raise NodeBusyError(f"node {node} changed while deciding for {key}: {exc}") from None
    return Outcome(State.ASSIGNED, translate.assigned_message(assignment), assignment)


async def engine_outcome(
    runtime: Runtime,
    topology: NumatopologySpec,
    state: NodeState,
    request: PodRequest,
    node: str,
    *,
    pinned: dict[str, list[int]],
    pinned_nics: dict[str, list[str]] | None,
    holds: str,
) -> Outcome:
    """The engine's answer on `state`, in its thread, around the devices the pod holds
    (`holds` names them in the log when the policy could not hold around them, as
    `relaxed` says); an `Assigned` outcome is not booked yet and has no message."""
    try:
        assignment, relaxed = await runtime.in_engine_thread(
            allocate_around, topology, state, request, node,
            engine=runtime.decisions, pinned=pinned, pinned_nics=pinned_nics,
        )  # fmt: skip
    except InvalidRequestError as exc:
        return Outcome(State.INVALID, translate.invalid_message(exc))
    except UnsatisfiableError as exc:
        return Outcome(State.UNSATISFIABLE, f"does not fit on {node}: {exc.reason}")
    if relaxed:
        logger.warning("%s holds %s; placed best-effort around them: %s",
                       request.key, holds, relaxed)  # fmt: skip
    return Outcome(State.ASSIGNED, "", assignment)


async def decide(
    runtime: Runtime,
    request: PodRequest,
    node: str,
    *,
    path: str,
    pinned: dict[str, list[int]] | None = None,
    pinned_nics: dict[str, list[str]] | None = None,
) -> Outcome | None:
    """The engine's outcome for `request` on `node`, an `Assigned` one booked in flight; None
    without a current Numatopology. Serialised per node; the engine works on a frozen copy,
    decides again if the watch changed what is free, and `reserve` checks the live state:
    nothing is booked twice. A pod booked there already (judged twice at once: event and
    retry) keeps the booking being written: a second would book other devices under its
    key, freeing the written ones in the ledger only."""
    ledger = runtime.ledger
    async with ledger.lock(node):
        held = held_outcome(runtime, node, request.key)
        if held is not None:
            return held
        started = time.perf_counter()
        outcome = await _engine_outcome(runtime, request, node, pinned, pinned_nics)
        if outcome is None:
            return None
        held = held_outcome(runtime, node, request.key)
        if held is not None:
            return held
        if outcome.assignment is not None:
            outcome = book(runtime, node, request.key, outcome.assignment)
        runtime.metrics.latency.labels(path).observe(time.perf_counter() - started)
    return outcome


async def _engine_outcome(
    runtime: Runtime,
    request: PodRequest,
    node: str,
    pinned: dict[str, list[int]] | None,
    pinned_nics: dict[str, list[str]] | None,
) -> Outcome | None:
    """The engine's answer on what is free on `node`, asked again (`DECIDE_ATTEMPTS`) while
    the node changes under it; None without a current Numatopology or a new spec each time."""
    ledger = runtime.ledger
    outcome: Outcome | None = None
    for attempt in range(1, DECIDE_ATTEMPTS + 1):
        topology, live = ledger.topology(node), ledger.state(node)
        frozen = ledger.frozen_state(node)
        if topology is None or live is None or frozen is None:
            return None
        if runtime.stale_reason(node) is not None:
            return None
        # Every booking and release bumps it: a decision meanwhile may use what was taken.
        before = live.version
        outcome = await engine_outcome(
            runtime, topology, frozen, request, node,
            pinned=pinned or {}, pinned_nics=pinned_nics, holds=f"GPUs {pinned}",
        )  # fmt: skip
        if outcome.state == State.INVALID:
            return outcome
        changed = (
            ledger.topology(node) is not topology
            or ledger.state(node) is not live
            or live.version != before
        )
        if not changed:
            return outcome
        logger.info(
            "node %s changed while deciding for %s (attempt %d); deciding again",
            node, request.key, attempt,
        )  # fmt: skip
    if ledger.topology(node) is not topology:
        return None  # a new spec every time: let the next event for it decide
    return outcome


async def _write(runtime: Runtime, pod: PodView, outcome: Outcome) -> None:
    """Patch the pod's state and reason, then queue its Event; a failed or fenced patch
    frees the booking. Of two retries deciding at once, only the first writes."""
    key = pod.key
    record = runtime.pods.of(key)
    if record.written == outcome.state:
        return
    record.written = outcome.state
    reason = "" if outcome.state == State.ASSIGNED else outcome.message
    try:
        await pod_writes.write_outcome(runtime, pod, outcome.state, outcome.assignment, reason)
    except (KubeError, NotActiveError):
        record.written = None
        runtime.ledger.cancel(key)
        raise
    _count(runtime, outcome)
    warning = outcome.state != State.ASSIGNED
    runtime.events.post(pod.ref, warning=warning, reason=outcome.reason, message=outcome.message)


def _count(runtime: Runtime, outcome: Outcome) -> None:
    runtime.metrics.decisions.labels(outcome.state.value.lower()).inc()
    if outcome.state == State.UNSATISFIABLE:
        runtime.metrics.unsatisfiable.inc()
    elif outcome.state == State.INVALID:
        runtime.metrics.invalid.inc()
    runtime.metrics.ledger_pods.set(len(runtime.ledger))


def _said(runtime: Runtime, pod: PodView) -> tuple[str | None, bool]:
    """(the pod's state as far as we know, whether a reason goes with it): our write not
    seen back yet wins over the body; once seen, the newest body the watch delivered wins
    over this decision's (a retry or follow-up may hold one from before our write)."""
    record = runtime.pods.get(pod.key)
    if record is not None:
        if record.written is not None:
            return record.written, True
        latest = record.annotated
        # Same uid only: a name-only body (`mark_invalid` of another pod) writes its own why.
        if latest is not None and pod.uid and pod.uid == latest.uid:
            pod = latest
    return translate.state_of(pod), bool(translate.reason_of(pod))


async def assign_bound_pod(runtime: Runtime, pod: PodView) -> State | None:
    """Decide for a pod bound to its node; returns its state now (None: it waits). Skips
    pods booked already (in flight) and nodes without a current Numatopology (logged)."""
    key, node = pod.key, pod.node
    if node is None or not translate.is_waiting(pod) or runtime.ledger.holds(key):
        return None
    try:
        request = pod.request(runtime.settings.resources)
    except InvalidRequestError as exc:
        outcome: Outcome | None = Outcome(State.INVALID, translate.invalid_message(exc))
    else:
        if _gated(runtime, request, node) and not runtime.gpu_admissions.take(node, key):
            logger.info(
                "pod %s waits: GPUs of %s on steered node %s not yet admitted",
                key, runtime.gpu_admissions.holder(node), node,
            )  # fmt: skip
            return None
        topology, resources = runtime.ledger.topology(node), runtime.settings.resources
        held = realigning.held_pins(pod.observed, topology, resources) if topology else None
        pins, nic_pins = held or ({}, {})
        # A pod holding GPUs or NICs (it ran, lost its assignment): decided around them first.
        outcome = await decide(
            runtime, request, node, path="assigner", pinned=pins, pinned_nics=nic_pins
        )
        if (pins or nic_pins) and outcome is not None and outcome.state == State.UNSATISFIABLE:
            outcome = await decide(runtime, request, node, path="assigner")
        if outcome is None or outcome.state != State.ASSIGNED:
            runtime.gpu_admissions.admitted(key)
    if outcome is None:
        why = runtime.stale_reason(node) or (
            f"no Numatopology for node {node} yet (is the numatopo exporter running there?)"
        )
        logger.info("pod %s waits: %s; it is retried when that changes", key, why)
        return None
    # Read after deciding: the same pod decided twice at once (its event and its retry)
    # may have seen the other's write, even come back from the watch, meanwhile.
    current, has_reason = _said(runtime, pod)
    if outcome.state == current and (outcome.state == State.ASSIGNED or has_reason):
        return outcome.state
    logger.info("pod %s on %s: %s: %s", key, node, outcome.state, outcome.message)
    await _write(runtime, pod, outcome)
    return outcome.state


async def mark_invalid(
    runtime: Runtime, pod: PodView, why: str, *, event_reason: str = translate.INVALID
) -> None:
    """`state: Invalid` with `why` for a pod whose own assignment is unusable; written once."""
    current, has_reason = _said(runtime, pod)
    known = runtime.pods.get(pod.key)
    latest = known.annotated if known is not None else None
    # A name-only body (a neighbour's report, `handlers`) does not see the pod's own
    # write once the watch has shown it back; the newest body seen does, by its why.
    newest = None if latest is None else (translate.state_of(latest), translate.reason_of(latest))
    if (current == State.INVALID and has_reason) or newest == (State.INVALID, why):
        return
    runtime.check_may_write()
    record = runtime.pods.of(pod.key)
    record.written = State.INVALID
    try:
        await pod_writes.write_invalid(runtime, pod, why)
    except KubeError:
        record.written = None
        raise
    _count(runtime, Outcome(State.INVALID, why))
    runtime.events.post(pod.ref, warning=True, reason=event_reason, message=why)


def _problem(runtime: Runtime, key: str) -> tuple[str, str] | None:
    """(why, Event reason) when the pod's own assignment cannot be trusted."""
    record = runtime.pods.get(key)
    if record is not None and record.unreadable is not None:
        return record.unreadable, translate.INVALID
    node = runtime.ledger.node_of(key)
    overlap = runtime.ledger.untrusted(node).get(key) if node is not None else None
    if overlap is not None:
        return overlap, translate.UNTRUSTED
    return None


async def judge_pod(runtime: Runtime, pod: PodView) -> bool:
    """Bring one pod to its answer; True when it must be looked at again (waits, or in flight)."""
    if pod.ended:
        return False
    key = pod.key
    problem = _problem(runtime, key)
    if problem is not None:
        why, event_reason = problem
        logger.warning("not trusting the assignment of %s: %s", key, why)
        await mark_invalid(runtime, pod, why, event_reason=event_reason)
        return False
    followed = realigning.mismatch(pod)
    if followed is not None:
        return await realigning.realign(runtime, pod, *followed)
    if not translate.is_waiting(pod):
        return False
    state = await assign_bound_pod(runtime, pod)
    return state not in (State.ASSIGNED, State.INVALID)


async def settle(runtime: Runtime, pod: PodView) -> None:
    """`judge_pod`, requeued after a failed or fenced write or while waiting; never raises."""
    key = pod.key
    retries = runtime.retries
    again = True
    try:
        again = await judge_pod(runtime, pod)
    except KubeNotFoundError as exc:
        # The pod is gone (or re-created: a write for its uid refused); its deletion frees
        # what it held, a namesake is judged from its own events.
        logger.debug("pod %s: %s", key, exc)
        again = False
    except (KubeError, NotActiveError, NodeBusyError) as exc:
        pause = retries.schedule(key, pod, time.monotonic())
        logger.warning("pod %s: %s; judged again in %.1f s", key, exc, pause)
        runtime.metrics.retry_queue.set(len(retries))
        return
    except Exception:
        logger.exception("pod %s: unexpected error; it is judged again later", key)
        runtime.metrics.handler_errors.inc()
    if again:
        retries.schedule(key, pod, time.monotonic())
    else:
        retries.discard(key)
    runtime.metrics.retry_queue.set(len(retries))


# How often the retry loop looks for due pods at most (it sleeps until the next is due).
RETRY_TICK_SECONDS = 0.25


async def run_retries(runtime: Runtime) -> None:
    """Forever: judge each queued pod again when it is due (only while deciding)."""
    retries = runtime.retries
    while True:
        due = retries.next_due()
        now = time.monotonic()
        pause = RETRY_TICK_SECONDS if due is None else min(max(due - now, 0.0), RETRY_TICK_SECONDS)
        await asyncio.sleep(pause)
        if not runtime.deciding:
            continue
        due_now = retries.pop_due(time.monotonic())
        judged = 0
        try:
            for _, pod in due_now:
                if not runtime.deciding:
                    break
                runtime.metrics.retries.inc()
                await settle(runtime, pod)
                judged += 1
        finally:
            # A late renewal, a failure or a cancellation: pods not judged yet stay due.
            retries.put_back(key for key, _ in due_now[judged:])


Decider = Callable[[Runtime, PodView, PodRequest, str], Awaitable[Outcome | None]]
"""A bind's own decision for some pods (`dra_bind.decide`); None: decide as any pod."""


async def bind_pod(runtime: Runtime, pod: PodView, node: str, *, first: Decider) -> str:
    """The extender's bind: assignment, then Binding; '' or the error text. A failed
    Binding takes the assignment back (no pod holds one for a node it is not on)."""
    key = pod.key
    held_on = runtime.ledger.node_of(key)
    if held_on is not None and held_on != node:
        runtime.ledger.forget(key)  # a stale attempt for another node: never ran there
    outcome: Outcome | None = None
    if translate.is_waiting(pod.with_node(node)) and held_on != node:
        try:
            request = pod.request(runtime.settings.resources)
        except InvalidRequestError as exc:
            _count(runtime, Outcome(State.INVALID, ""))
            return translate.invalid_message(exc)
        if _gated(runtime, request, node) and not await runtime.gpu_admissions.wait_and_take(
            node, key
        ):
            logger.warning(
                "binding %s: the previous GPU pod on steered node %s was not seen admitted "
                "in time; steering may not tell them apart (Follow heals it)", key, node,
            )  # fmt: skip
        try:
            outcome = await first(runtime, pod, request, node)
            outcome = outcome or await decide(runtime, request, node, path="bind")
        finally:
            if outcome is None or outcome.state != State.ASSIGNED:
                runtime.gpu_admissions.admitted(key)  # nothing of it is in flight
        if outcome is None:
            return runtime.stale_reason(node) or f"no Numatopology for node {node}"
        if outcome.state != State.ASSIGNED:
            _count(runtime, outcome)
            return outcome.message
        try:
            await _write(runtime, pod, outcome)
        except NotActiveError as exc:
            return str(exc)
    try:
        runtime.check_may_write()
        await runtime.kube.create_binding(pod.namespace, pod.name, pod.uid, node)
    except (KubeError, NotActiveError) as exc:
        if await _bound_after_all(runtime, pod, node, exc):
            logger.info("binding %s to %s: %s, but the pod is bound there", key, node, exc)
            return ""
        runtime.metrics.decisions.labels("bind_failed").inc()
        runtime.gpu_admissions.admitted(key)
        if outcome is not None:
            await pod_writes.write_taken_back(
                runtime, pod.namespace, pod.name, uid=pod.uid, fenced=False
            )
            # Free now, not when the watch shows it: a bind again soon after must decide
            # and write afresh, neither trusting this booking nor skipping its write.
            runtime.ledger.displace(key)
            runtime.pods.of(key).written = None
        message = f"binding to {node} failed: {exc}"
        runtime.events.post(pod.ref, warning=True, reason=translate.BIND_FAILED, message=message)
        return f"binding {key} to {node} failed: {exc}"
    return ""


async def _bound_after_all(runtime: Runtime, pod: PodView, node: str, exc: Exception) -> bool:
    """Whether a Binding whose answer was lost (timeout, 5xx) or was a 409 went through
    anyway (the API server may commit and fail to say so; taking back a running pod's
    assignment would free its CPUs and GPUs). Asked of the pod; if that fails, not bound."""
    if not isinstance(exc, KubeError) or not (exc.transient or exc.status == 409):
        return False
    try:
        now = PodView(await runtime.kube.get_pod(pod.namespace, pod.name))
    except KubeError:
        return False
    return now.uid == pod.uid and now.node == node
