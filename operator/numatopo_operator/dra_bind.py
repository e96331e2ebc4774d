"""The extender's `/bind` of a pod whose devices come from ResourceClaims (I/O; the
reading of the claims is `numatopo_engine.dra.allocated`).

Such a pod, scheduled by kube-scheduler with the extender (no `numatopo.io/dra` gate),
has its claims allocated by the scheduler's DynamicResources plugin in PreBind, before
the extender's bind: the devices are chosen when `/bind` comes. Its assignment follows
them: the claims are read afresh, their devices mapped through the node's join to the
model's GPUs, NICs and CPUs, and the engine places CPUs and memory around exactly those
(pinned, as for a device-plugin pod Follow found holding other GPUs; best-effort around
them when its policy cannot hold with them). The pod's own claims' holds are its
devices, so the decision is made and booked over them (`Ledger.reserve(over=...)`).

A claim not allocated (yet), or one that cannot be followed, is said in a Warning Event
`DRAClaimsNotFollowed` and the log, and the pod is decided from its requests as before.
"""

from __future__ import annotations

import logging
import time

from numatopo_engine.annotations import State
from numatopo_engine.dra.allocated import NotFollowedError, claimed_devices
from numatopo_engine.dra.claims import pod_claims
from numatopo_engine.dra.pods import devices_from_claims
from numatopo_engine.errors import InvalidRequestError, OverlapError, UnsatisfiableError
from numatopo_engine.relaxed_allocation import allocate_around
from numatopo_engine.request import PodRequest
from numatopo_operator import assigning, translate
from numatopo_operator.assigning import Outcome
from numatopo_operator.dra_holds import HELD
from numatopo_operator.errors import NodeBusyError
from numatopo_operator.runtime import Runtime
from numatopo_operator.translate import RawPod

__all__ = ["NOT_FOLLOWED", "decide"]

logger = logging.getLogger(__name__)

NOT_FOLLOWED = "DRAClaimsNotFollowed"


async def decide(runtime: Runtime, pod: RawPod, request: PodRequest, node: str) -> Outcome | None:
    """The pod's decision on `node` around its claims' devices, booked; None when its
    devices do not come from claims, or they cannot be followed (said in an Event):
    then it is decided from its requests."""
    resources = runtime.settings.resources
    if not devices_from_claims(pod, lambda r: resources.is_gpu(r) or resources.is_nic(r)):
        return None
    ref = assigning.pod_ref(pod)
    ledger = runtime.ledger
    topology = ledger.topology(node)
    if topology is None or runtime.stale_reason(node) is not None:
        return None  # nothing can be decided there; the caller says why
    entries = pod_claims(pod)
    try:
        joined = runtime.dra_holds.joined(node, topology)
        if joined is None:
            raise NotFollowedError(f"node {node} publishes no DRA devices")
        claims = {}
        for entry in entries:
            if entry.claim is None:
                continue  # its template's claim is not created yet: said below
            raw = await runtime.kube.get_resource_claim(ref["namespace"], entry.claim)
            if raw is not None:
                claims[entry.claim] = raw
        claimed = claimed_devices(topology, request, entries, claims, joined)
    except NotFollowedError as exc:
        message = (
            "numatopo places this pod's CPUs and memory from its requests, not next to "
            f"its claims' devices: {exc}"
        )
        logger.warning("binding %s to %s: %s", request.key, node, message)
        await runtime.kube.post_event(ref, warning=True, reason=NOT_FOLLOWED, message=message)
        return None
    own = {f"{HELD}{ref['namespace']}/{e.claim}" for e in entries if e.claim}
    started = time.perf_counter()
    async with ledger.lock(node):
        held = ledger.state(node)
        if ledger.node_of(request.key) == node and held and request.key in held.assignments:
            mine = held.assignments[request.key]
            return Outcome(State.ASSIGNED, translate.assigned_message(mine), mine)
        frozen = ledger.frozen_state(node)
        if frozen is None:
            return None
        state = frozen.copy()
        for hold in own:
            state.release(hold)
        try:
            assignment, relaxed = await runtime.in_engine_thread(
                allocate_around, topology, claimed.around(state), claimed.request,
                node, engine=runtime.decisions, pinned=claimed.gpus, pinned_nics=claimed.nics,
            )  # fmt: skip
        except InvalidRequestError as exc:
            return Outcome(State.INVALID, translate.invalid_message(exc))
        except UnsatisfiableError as exc:
            return Outcome(State.UNSATISFIABLE, translate.unsatisfiable_message(node, exc.reason))
        if relaxed:
            logger.warning("%s holds claimed devices on %s; placed best-effort around them: %s",
                           request.key, node, relaxed)  # fmt: skip
        assignment = assignment.model_copy(update={"seq": ledger.next_seq(node)})
        try:
            ledger.reserve(node, request.key, assignment, over=own)
        except (KeyError, OverlapError) as exc:
            raise NodeBusyError(
                f"node {node} changed while deciding for {request.key}: {exc}"
            ) from None
    runtime.metrics.latency.labels("bind").observe(time.perf_counter() - started)
    return Outcome(State.ASSIGNED, translate.assigned_message(assignment), assignment)
