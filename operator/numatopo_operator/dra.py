"""GPUs on DRA clusters: the ResourceClaims of a pod gated `numatopo.io/dra` allocated by
numatopo, then the pod released onto their node (I/O; the decision is
`numatopo_engine.dra`). docs/DESIGN.md, "GPUs on DRA clusters": the order of the writes,
resuming or rolling back a write stopped half-way (`DRARolledBack`), group members' claims,
what is left to the scheduler (`DRALeftToScheduler`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pydantic

from numatopo_engine import annotations as keys
from numatopo_engine import node_rules
from numatopo_engine.annotations import Assignment, State
from numatopo_engine.dra import api
from numatopo_engine.dra.claims import (
    ClaimDecision,
    PodClaim,
    UndecidedError,
    allocations_for,
    decide_claims,
    pod_claims,
)
from numatopo_engine.dra.join import DeviceId, DraNode, join_node
from numatopo_engine.errors import InvalidRequestError, OverlapError, UnsatisfiableError
from numatopo_engine.state import NodeState
from numatopo_operator import assigning, pod_view, pod_writes, translate
from numatopo_operator.dra_holds import HELD, allocated_devices, book_holds, claim_key, holds_on
from numatopo_operator.errors import BookingError, KubeError, KubeNotFoundError, NotActiveError
from numatopo_operator.groups import members as group_members
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime
from numatopo_operator.translate import RawPod

logger = logging.getLogger(__name__)

LEFT = "DRALeftToScheduler"
UNSATISFIABLE = "DRAUnsatisfiable"
ALLOCATED = "DRAAllocated"
ROLLED_BACK = "DRARolledBack"


def is_gated(pod: RawPod) -> bool:
    opted = keys.POLICY in ((pod.get("metadata") or {}).get("annotations") or {})
    return opted and group_members.is_gated(pod, keys.DRA_GATE)


_busy: set[str] = set()


async def settle_pod(runtime: Runtime, pod: PodView) -> None:
    """`settle` for a pod held by the DRA gate, `assigning.settle` for any other."""
    if is_gated(pod):
        await settle(runtime, pod)
    else:
        await assigning.settle(runtime, pod)


async def settle(runtime: Runtime, pod: PodView) -> None:
    """Decide a gated DRA pod once at a time; a pod that must wait is looked at again."""
    if group_members.is_gated(pod):
        return  # a group member: its group places it first (then it comes back here)
    key = pod_view.pod_key(pod)
    if key in _busy:
        return
    _busy.add(key)
    try:
        waits = await _settle(runtime, pod)
    except (KubeError, NotActiveError) as exc:
        logger.warning("DRA pod %s: %s; retried", key, exc)
        waits = True
    except Exception:
        # No next event may bring a gated pod back: retried as one that waits (a restart).
        logger.exception("DRA pod %s: deciding failed; retried", key)
        runtime.metrics.task_restarts.labels("DRA pod decision").inc()
        waits = True
    finally:
        _busy.discard(key)
    if waits:
        loop = asyncio.get_running_loop()
        loop.call_later(runtime.settings.retry_base_seconds * 4, _again, runtime, pod)


def _again(runtime: Runtime, pod: PodView) -> None:
    async def again() -> None:
        try:
            fresh = await runtime.kube.get_pod(pod.namespace, pod.name)
        except KubeError:
            return
        if is_gated(fresh) and runtime.deciding:
            await settle(runtime, PodView(fresh))

    task = asyncio.ensure_future(again())
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


_tasks: set[asyncio.Future[None]] = set()


async def _settle(runtime: Runtime, pod: PodView) -> bool:
    """True when the pod must wait (claims not there yet, nothing fits now)."""
    key, ref = pod.key, pod.ref
    if keys.GROUP_PLACEMENT in pod.annotations:
        return await _member(runtime, pod)
    if translate.state_of(pod) == State.ASSIGNED:
        return await _resume(runtime, pod)
    if runtime.ledger.holds(key):
        return False  # decided (maybe by this very call's predecessor): never allocate twice
    entries = pod_claims(pod)
    if not entries:
        return await _leave(runtime, pod, "the pod references no ResourceClaim")
    try:
        claims = await _fetched_claims(runtime, ref["namespace"], entries)
        if claims is None:
            return True
        base = pod.request(runtime.settings.resources)
        decision = await _decide(runtime, pod, base, entries, claims)
    except InvalidRequestError as exc:
        return await _leave(runtime, pod, f"invalid request: {exc}")
    except UndecidedError as exc:
        return await _leave(runtime, pod, str(exc))
    except UnsatisfiableError as exc:
        record = runtime.pods.of(key)
        if record.unsatisfiable != str(exc):  # once per reason, not once per retry
            record.unsatisfiable = str(exc)
            runtime.events.post(ref, warning=True, reason=UNSATISFIABLE, message=str(exc))
        return True
    if decision is None:
        return True
    try:
        await pod_writes.write_outcome(runtime, pod, State.ASSIGNED, decision.assignment)
        await _write_claims(runtime, ref, decision.allocations, claims)
        await _release(runtime, pod, decision.assignment, decision.allocations)
    except BaseException:
        runtime.ledger.cancel(key)
        raise
    return False


async def _slices_and_classes(
    runtime: Runtime,
) -> tuple[list[api.ResourceSlice], dict[str, api.DeviceClass]]:
    """Every ResourceSlice, and every DeviceClass by name, as the API has them now."""
    slices = [
        api.ResourceSlice.model_validate(s)
        for s in (await runtime.kube.list_resource_slices()).items
    ]
    classes = {
        c["metadata"]["name"]: api.DeviceClass.model_validate(c)
        for c in (await runtime.kube.list_device_classes()).items
    }
    return slices, classes


async def _decide(
    runtime: Runtime, pod: PodView, base: Any, entries: Any, claims: Mapping[str, api.ResourceClaim]
) -> ClaimDecision | None:
    slices, classes = await _slices_and_classes(runtime)
    others = []
    for raw in (await runtime.kube.list_resource_claims()).items:
        try:
            others.append(api.ResourceClaim.model_validate(raw))
        except pydantic.ValidationError as exc:
            # Its devices cannot be booked: deciding anyway could hand them out twice.
            raise UndecidedError(f"an allocated claim is unreadable: {exc}") from None
    # Read once, not once per node: a cluster's claims times its DRA nodes added up.
    held = {c.key: allocated_devices(c.model_dump(mode="json", by_alias=True)) for c in others}
    key = pod_view.pod_key(pod)
    best: ClaimDecision | None = None
    refusal: UnsatisfiableError | None = None
    for node in sorted(runtime.ledger.nodes()):
        topology, state = runtime.ledger.topology(node), runtime.ledger.frozen_state(node)
        if topology is None or state is None or runtime.stale_reason(node) is not None:
            continue
        joined = join_node(node, topology, slices)
        if not joined.devices:
            continue
        refused = await node_refusal(runtime, pod, node)
        if refused:
            refusal = refusal or UnsatisfiableError(f"node {node}: {refused}")
            continue
        trial = book_claims(state.copy(), joined, held)
        try:
            found = decide_claims(
                topology, trial, base, entries, claims, classes, joined, engine=runtime.decisions
            )
        except UnsatisfiableError as exc:
            refusal = refusal or exc
            continue
        if best is None or found.score > best.score:
            best = found
    if best is None:
        raise refusal or UnsatisfiableError("no node publishes devices for these claims")
    async with runtime.ledger.lock(best.node):
        assignment = best.assignment.model_copy(update={"seq": runtime.ledger.next_seq(best.node)})
        try:
            runtime.ledger.reserve(best.node, key, assignment)
        except (KeyError, OverlapError):
            return None  # the node changed meanwhile: decided again
    return ClaimDecision(best.node, assignment, best.allocations, best.score)


async def node_refusal(runtime: Runtime, pod: RawPod, node: str) -> str:
    """Why kube-scheduler's node filters (`node_rules`) keep `pod` off `node` ('' if not):
    sent there by its nodeSelector, it would stay Pending. The Node from group placement's
    index, else read now."""
    view = runtime.groups.node_view(node) if runtime.settings.groups else None
    if view is not None:
        shown = view.as_node(node)
    else:
        try:
            shown = await runtime.kube.get_node(node)
        except KubeNotFoundError:
            return "there is no such Node"
    return node_rules.refusal(pod.get("spec") or {}, shown)


def book_claims(
    state: NodeState, node: DraNode, held: Mapping[str, tuple[DeviceId, ...]]
) -> NodeState:
    """`state` with the holds of this decision's fresh list of claims (claim key -> the
    devices it holds) on `node` instead of the watched ones: other pods' and schedulers'
    devices are never handed out twice."""
    for key in [k for k in state.assignments if k.startswith(HELD)]:
        state.release(key)
    book_holds(state, holds_on(node, held))
    return state


async def _write_claims(
    runtime: Runtime,
    ref: Mapping[str, str],
    allocations: Mapping[str, api.AllocationResult],
    claims: Mapping[str, api.ResourceClaim],
) -> None:
    """Each claim's finalizer, then its allocation reserved for the pod."""
    for name, allocation in allocations.items():
        consumer = api.ResourceClaimConsumerReference(name=ref["name"], uid=ref["uid"]).to_wire()
        metadata = claims[name].metadata
        finalizers, version = metadata.finalizers, metadata.resource_version
        if api.DELETE_PROTECTION not in finalizers:
            runtime.check_may_write()
            patched = await runtime.kube.patch_resource_claim(
                ref["namespace"], name,
                {"metadata": {"resourceVersion": version,
                              "finalizers": [*finalizers, api.DELETE_PROTECTION]}},
            )  # fmt: skip
            version = str((patched.get("metadata") or {}).get("resourceVersion") or version)
        runtime.check_may_write()
        await runtime.kube.patch_resource_claim_status(
            ref["namespace"], name,
            {"metadata": {"resourceVersion": version},
             "status": {"allocation": allocation.written(), "reservedFor": [consumer]}},
        )  # fmt: skip


async def _release(
    runtime: Runtime,
    pod: PodView,
    assignment: Assignment,
    allocations: Mapping[str, api.AllocationResult],
    *,
    resumed: str = "",
) -> None:
    """The gate removed and the node selected, last: then the scheduler may take it."""
    ref, node = pod.ref, assignment.node
    runtime.check_may_write()
    operations = group_members.release_operations(pod, node, keys.DRA_GATE)
    await runtime.kube.patch_pod_spec(ref["namespace"], ref["name"], operations, uid=ref["uid"])
    devices = ", ".join(
        f"{r.request}={r.device}" for a in allocations.values() for r in a.devices.results
    )
    said = translate.assigned_message(assignment)
    message = f"claims allocated on {node}{resumed}: {devices}; {said}"
    runtime.events.post(ref, warning=False, reason=ALLOCATED, message=message)


async def _resume(runtime: Runtime, pod: PodView) -> bool:
    """A gated pod with its assignment: the write stopped before the claims or the
    release. Complete it with the assignment's devices, or, where the claims can no longer
    hold them, take it back (and its allocations) to decide afresh. True: look again."""
    ref = pod.ref
    fresh = PodView.of(await runtime.kube.get_pod(ref["namespace"], ref["name"]))
    if fresh.uid != ref["uid"]:
        return False  # replaced by a namesake: its claims are reserved by its own events
    if not is_gated(fresh) or translate.state_of(fresh) != State.ASSIGNED:
        return False  # released meanwhile (an old event of a write that completed)
    try:
        booking = translate.booking_from_pod(fresh, runtime.verifier)
    except BookingError as exc:
        return await _roll_back(runtime, fresh, {}, str(exc))
    if booking is None:
        return False
    entries = pod_claims(fresh)
    claims: dict[str, api.ResourceClaim] = {}
    pending: dict[str, api.ResourceClaim] = {}
    for entry in entries:
        raw = None
        if entry.claim is not None:
            raw = await runtime.kube.get_resource_claim(ref["namespace"], entry.claim)
        if entry.claim is None or raw is None:
            return await _roll_back(runtime, fresh, claims, f"claim {entry.name} is gone")
        try:
            claim = claims[entry.claim] = api.ResourceClaim.model_validate(raw)
        except pydantic.ValidationError as exc:
            return await _roll_back(runtime, fresh, claims, f"claim {entry.claim}: {exc}")
        if claim.status.allocation is None:
            pending[entry.claim] = claim
        elif not _reserved_for(claim, ref["uid"]):
            return await _roll_back(
                runtime, fresh, claims, f"claim {entry.claim} is allocated to another consumer"
            )
    assignment = booking.assignment
    if pending and runtime.ledger.topology(assignment.node) is None:
        return True
    try:
        allocations = await _allocations(runtime, fresh, assignment, entries, claims, pending)
    except (InvalidRequestError, UndecidedError, UnsatisfiableError) as exc:
        return await _roll_back(runtime, fresh, claims, str(exc))
    await _write_claims(runtime, ref, {n: allocations[n] for n in pending}, pending)
    logger.info("DRA pod %s: resuming its write (%d claims left)", ref["name"], len(pending))
    await _release(runtime, fresh, assignment, allocations, resumed=" (resumed)")
    return False


async def _member(runtime: Runtime, pod: PodView) -> bool:
    """A group member released onto its planned node: its claims get the devices its plan
    named (`groups.claim_demands` counted them), then the gate goes. Where it named none or
    they no longer satisfy the claims, kube-scheduler allocates there. True: look again."""
    ref = pod.ref
    scheduler = "kube-scheduler allocates this group member's claims on its planned node"
    try:
        booking = translate.booking_from_pod(pod, runtime.verifier)
    except BookingError as exc:
        return await _leave(runtime, pod, f"{scheduler}: {exc}")
    if booking is None:
        return await _leave(runtime, pod, f"{scheduler}: it carries no assignment")
    entries = pod_claims(pod)
    try:
        claims = await _fetched_claims(runtime, ref["namespace"], entries)
    except UndecidedError as exc:
        return await _leave(runtime, pod, str(exc))
    if claims is None:
        return True
    pending: dict[str, api.ResourceClaim] = {}
    for name, claim in claims.items():
        if claim.status.allocation is None:
            pending[name] = claim
        elif not _reserved_for(claim, ref["uid"]):
            return await _leave(runtime, pod, f"{scheduler}: claim {name} is allocated already")
    assignment = booking.assignment
    if not any(c.gpu_indices or c.nics for c in assignment.containers.values()):
        return await _leave(runtime, pod, f"{scheduler}: its plan names no device")
    if runtime.ledger.topology(assignment.node) is None:
        return True
    try:
        allocations = await _allocations(runtime, pod, assignment, entries, claims, pending)
    except (InvalidRequestError, UndecidedError, UnsatisfiableError) as exc:
        return await _leave(runtime, pod, f"{scheduler}: the plan's devices: {exc}")
    allocations = {n: allocations[n] for n in pending}
    await _write_claims(runtime, ref, allocations, pending)
    await _release(runtime, pod, assignment, allocations, resumed=" (its group's plan)")
    return False


async def _fetched_claims(
    runtime: Runtime, namespace: str, entries: list[PodClaim]
) -> dict[str, api.ResourceClaim] | None:
    """The pod's claims now, by name, in the pod's order; None while one is not created
    yet (a template's); UndecidedError names an unreadable one."""
    if any(e.claim is None for e in entries):
        return None
    claims: dict[str, api.ResourceClaim] = {}
    for entry in entries:
        assert entry.claim is not None
        raw = await runtime.kube.get_resource_claim(namespace, entry.claim)
        if raw is None:
            return None
        try:
            claims[entry.claim] = api.ResourceClaim.model_validate(raw)
        except pydantic.ValidationError as exc:
            raise UndecidedError(f"claim {entry.claim} is unreadable: {exc}") from None
    return claims


def _reserved_for(claim: api.ResourceClaim, uid: str) -> bool:
    return any(c.uid == uid for c in claim.status.reserved_for)


async def _allocations(  # noqa: PLR0917 (the pod, its decision and its claims)
    runtime: Runtime,
    pod: PodView,
    assignment: Assignment,
    entries: Any,
    claims: Mapping[str, api.ResourceClaim],
    pending: Mapping[str, api.ResourceClaim],
) -> dict[str, api.AllocationResult]:
    """The claims' allocations from the assignment's devices ({} when none is `pending`);
    `UnsatisfiableError` when another claim holds one of them now."""
    if not pending:
        return {}
    slices, classes = await _slices_and_classes(runtime)
    topology = runtime.ledger.topology(assignment.node)
    if topology is None:
        raise UndecidedError(f"node {assignment.node} has no Numatopology")
    joined = join_node(assignment.node, topology, slices)
    base = pod.request(runtime.settings.resources)
    found = allocations_for(assignment, base, entries, claims, classes, joined)
    mine = {c.key for c in claims.values()}
    ours = {DeviceId(r.driver, r.pool, r.device) for a in found.values() for r in a.devices.results}
    for raw in (await runtime.kube.list_resource_claims()).items:
        taken = ours & set(allocated_devices(raw))
        if taken and claim_key(raw) not in mine:
            shown = ", ".join(sorted(d.device for d in taken))
            raise UnsatisfiableError(f"claim {claim_key(raw)} holds {shown} now")
    return found


async def _roll_back(
    runtime: Runtime, pod: PodView, claims: Mapping[str, api.ResourceClaim], why: str
) -> bool:
    """Take back the pod's assignment and its allocations, to decide afresh (a Warning)."""
    ref = pod.ref
    for name, claim in claims.items():
        if claim.status.allocation is None or not _reserved_for(claim, ref["uid"]):
            continue
        runtime.check_may_write()
        await runtime.kube.patch_resource_claim_status(
            ref["namespace"], name,
            {"metadata": {"resourceVersion": claim.metadata.resource_version},
             "status": {"allocation": None, "reservedFor": []}},
        )  # fmt: skip
    await pod_writes.write_taken_back(runtime, ref["namespace"], ref["name"], uid=ref["uid"])
    runtime.ledger.cancel(pod.key)
    message = f"numatopo took back this pod's unfinished DRA decision and decides again: {why}"
    logger.warning("DRA pod %s: %s", ref["name"], message)
    runtime.events.post(ref, warning=True, reason=ROLLED_BACK, message=message)
    return True


async def _leave(runtime: Runtime, pod: PodView, why: str) -> bool:
    """Remove only the gate: the scheduler allocates the claims as it would without us."""
    ref = pod.ref
    operations = group_members.gate_removal(pod, keys.DRA_GATE)
    runtime.check_may_write()
    await runtime.kube.patch_pod_spec(ref["namespace"], ref["name"], operations, uid=ref["uid"])
    runtime.events.post(
        ref, warning=True, reason=LEFT,
        message=f"numatopo leaves this pod's ResourceClaims to the scheduler: {why}",
    )  # fmt: skip
    return False
