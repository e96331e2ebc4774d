"""The extender's `/bind` of a pod whose devices come from ResourceClaims (I/O; the
reading of the claims is `numatopo_engine.dra.allocated`): its CPUs and memory decided
around the devices kube-scheduler allocated in PreBind, and `follow_member` for a group
member's. docs/DESIGN.md, "GPUs on DRA clusters" ("Its bind follows the claims", and
the member without the DRA gate under "Groups"), says why and what is kept when the
claims cannot be followed (`DRAClaimsNotFollowed`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection, Mapping
from functools import partial
from typing import Any

from numatopo_engine import annotations as keys
from numatopo_engine.annotations import Assignment, State
from numatopo_engine.dra.allocated import Claimed, NotFollowedError, claimed_devices
from numatopo_engine.dra.claims import PodClaim, pod_claims
from numatopo_engine.dra.extended import EXTENDED_ENTRY, asked_served, extended_claim
from numatopo_engine.dra.pods import dra_served
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.request import PodRequest
from numatopo_kube import KubeInvalidNameError
from numatopo_operator import assigning, pod_writes, translate
from numatopo_operator.assigning import Decider, Outcome
from numatopo_operator.dra_extender import from_claims
from numatopo_operator.dra_holds import HELD
from numatopo_operator.pod_view import PodView
from numatopo_operator.runtime import Runtime

logger = logging.getLogger(__name__)

NOT_FOLLOWED = "DRAClaimsNotFollowed"


def plugin_served(node: Mapping[str, Any]) -> frozenset[str]:
    """The resources the Node's `status.allocatable` lists: where it lists an extended resource
    a DeviceClass also serves, kube-scheduler has a device plugin serve it on that node (its
    DynamicResources plugin maps to DRA only the names the node's allocatable lacks)."""
    status = node.get("status")
    allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
    return frozenset(map(str, allocatable)) if isinstance(allocatable, Mapping) else frozenset()


def decider(plugin: Collection[str]) -> Decider:
    """`decide` on a node whose allocatable lists `plugin` (`plugin_served`)."""
    return partial(decide, plugin=plugin)


def _from_plugins_only(pod: PodView, request: PodRequest) -> PodRequest:
    """`request` less the GPUs and NICs DRA serves its containers through kube-scheduler's claim
    (`dra_served`; the claim's devices replace them): an extended resource of a device-plugin
    name (`nvidia.com/gpu`) reads as device-plugin GPUs until then."""
    served = dra_served(pod)
    if not served:
        return request
    containers = []
    for container in request.containers:
        kept = container
        if (kept.name, kept.gpu_resource) in served:
            kept = dataclasses.replace(kept, gpus=0, gpu_resource=None)
        if (kept.name, kept.nic_resource) in served:
            kept = dataclasses.replace(kept, nics=0, nic_resource=None)
        containers.append(kept)
    return dataclasses.replace(request, containers=tuple(containers))


async def _claimed(
    runtime: Runtime,
    pod: PodView,
    request: PodRequest,
    node: str,
    topology: NumatopologySpec,
    *,
    plugin: Collection[str],
) -> Claimed:
    """What the pod's claims, read afresh, give its containers on `node`; raises
    `NotFollowedError`."""
    joined = runtime.dra_holds.joined(node, topology)
    if joined is None:
        raise NotFollowedError(f"node {node} publishes no DRA devices")
    entries = _entries(runtime, pod, plugin)
    claims = {}
    for entry in entries:
        if entry.claim is None:
            continue  # its template's claim is not created yet: `claimed_devices` says so
        try:
            raw = await runtime.kube.get_resource_claim(pod.namespace, entry.claim)
        except KubeInvalidNameError as exc:  # no claim has such a name: a status by hand
            raise NotFollowedError(exc.message) from None
        if raw is not None:
            claims[entry.claim] = raw
    base = _from_plugins_only(pod, request)
    return claimed_devices(topology, base, entries, claims, joined, uid=pod.uid)


def _asks_extended(runtime: Runtime, pod: PodView, plugin: Collection[str]) -> bool:
    """Whether DRA serves the pod an extended resource (KEP-5004) on a node whose allocatable
    lists `plugin`: its status names kube-scheduler's claim for them, or it asks one a
    DeviceClass serves that no device plugin serves there."""
    if extended_claim(pod) is not None:
        return True
    asked = asked_served(pod, runtime.dra_holds.device_classes())
    return any(resource not in plugin for resource in asked)


def _entries(runtime: Runtime, pod: PodView, plugin: Collection[str]) -> list[PodClaim]:
    """The pod's claims, and kube-scheduler's for its extended resources DRA serves (its
    `claim` None while the pod's status names none) on a node whose allocatable lists
    `plugin`."""
    extended = extended_claim(pod)
    if extended is None and _asks_extended(runtime, pod, plugin):
        extended = PodClaim(EXTENDED_ENTRY, None, ())
    return [*pod_claims(pod), *([extended] if extended else [])]


def _own_holds(runtime: Runtime, pod: PodView, plugin: Collection[str]) -> set[str]:
    """The hold keys of the pod's own claims (`dra_holds`)."""
    return {f"{HELD}{pod.namespace}/{e.claim}" for e in _entries(runtime, pod, plugin) if e.claim}


def _not_followed(runtime: Runtime, pod: PodView, node: str, message: str) -> None:
    logger.warning("binding %s to %s: %s", pod.key, node, message)
    runtime.events.post(pod.ref, warning=True, reason=NOT_FOLLOWED, message=message)


async def _around(
    runtime: Runtime, key: str, node: str, claimed: Claimed, own: set[str]
) -> Outcome | None:
    """Decide on `node` around exactly the claimed devices and book it over the pod's own
    holds (`own`), replacing what `key` holds there; call under the node's lock. None
    when the node has no usable state."""
    ledger = runtime.ledger
    topology, frozen = ledger.topology(node), ledger.frozen_state(node)
    if topology is None or frozen is None:
        return None
    state = frozen.copy()
    for hold in own:
        state.release(hold)
    state.release(key)  # a group member's group booking: this decision replaces it
    outcome = await assigning.engine_outcome(
        runtime, topology, claimed.around(state), claimed.request, node,
        pinned=claimed.gpus, pinned_nics=claimed.nics, holds=f"claimed devices on {node}",
    )  # fmt: skip
    if outcome.assignment is None:
        return outcome
    return assigning.book(runtime, node, key, outcome.assignment, over=own)


async def decide(
    runtime: Runtime,
    pod: PodView,
    request: PodRequest,
    node: str,
    *,
    plugin: Collection[str],
) -> Outcome | None:
    """The pod's decision on `node` (whose allocatable lists `plugin`, `plugin_served`)
    around its claims' devices (kube-scheduler's claim for the extended resources DRA
    serves it included), booked; None when its devices do not come from claims, or they
    cannot be followed (said in an Event): then it is decided from its requests."""
    extended_only = not from_claims(runtime, pod)
    if extended_only and not _asks_extended(runtime, pod, plugin):
        return None
    ledger = runtime.ledger
    topology = ledger.topology(node)
    if topology is None or runtime.stale_reason(node) is not None:
        return None  # nothing can be decided there; the caller says why
    if extended_only and runtime.dra_holds.joined(node, topology) is None:
        return None  # no DRA device there: a device plugin serves its extended resources
    try:
        claimed = await _claimed(runtime, pod, request, node, topology, plugin=plugin)
    except NotFollowedError as exc:
        _not_followed(runtime, pod, node, (
            "numatopo places this pod's CPUs and memory from its requests, not next to "
            f"its claims' devices: {exc}"
        ))  # fmt: skip
        return None
    started = time.perf_counter()
    async with ledger.lock(node):
        held = assigning.held_outcome(runtime, node, request.key)
        if held is not None:
            return held
        own = _own_holds(runtime, pod, plugin)
        outcome = await _around(runtime, request.key, node, claimed, own)
    runtime.metrics.latency.labels("bind").observe(time.perf_counter() - started)
    return outcome


def _follows(assignment: Assignment, claimed: Claimed) -> bool:
    """Whether `assignment` already names exactly the claimed devices, per container
    (a `/bind` again after a Binding that failed: decided already)."""
    containers = assignment.containers
    for name, container in containers.items():
        if sorted(container.gpu_indices) != claimed.gpus.get(name, []):
            return False
        if sorted(container.nics) != claimed.nics.get(name, []):
            return False
    for name, cpus in claimed.cpus.items():
        found = containers.get(name)
        if found is None or not set(cpus) <= set(found.cpus):
            return False
    return set(claimed.gpus) | set(claimed.nics) <= set(containers)


async def follow_member(
    runtime: Runtime, pod: PodView, node: str, *, plugin: Collection[str]
) -> None:
    """A group member whose devices come from its claims, booked on `node` by its group,
    follows them (docs/DESIGN.md, "GPUs on DRA clusters", the member without the DRA gate).
    Raises `KubeError`, `NotActiveError`, `NodeBusyError` (the bind fails and is retried)."""
    key, ledger = pod.key, runtime.ledger
    if keys.GROUP_PLACEMENT not in pod.annotations or not from_claims(runtime, pod):
        return
    current = pod.assignment
    if current is None or current.node != node or ledger.node_of(key) != node:
        return  # not booked on this node by its group: `bind_pod` decides as for any pod
    kept = "numatopo keeps this group member's CPUs and memory where its group placed them"
    topology = ledger.topology(node)
    stale = runtime.stale_reason(node) if topology is not None else translate.NO_NUMATOPOLOGY
    if topology is None or stale is not None:
        _not_followed(runtime, pod, node, f"{kept}: nothing can be decided there: {stale}")
        return
    try:
        request = pod.request(runtime.settings.resources)
        claimed = await _claimed(runtime, pod, request, node, topology, plugin=plugin)
    except (InvalidRequestError, NotFollowedError) as exc:
        _not_followed(runtime, pod, node, f"{kept}, not next to its claims' devices: {exc}")
        return
    started = time.perf_counter()
    async with ledger.lock(node):
        held = ledger.state(node)
        booked = held.assignments.get(key) if held is not None else None
        if booked is None or ledger.node_of(key) != node or _follows(booked, claimed):
            return
        outcome = await _around(runtime, key, node, claimed, _own_holds(runtime, pod, plugin))
    runtime.metrics.latency.labels("bind").observe(time.perf_counter() - started)
    if outcome is None or outcome.assignment is None:
        why = outcome.message if outcome is not None else f"node {node} has no usable state"
        _not_followed(runtime, pod, node, f"{kept}: around its claims' devices, {why}")
        return
    try:
        await pod_writes.write_outcome(runtime, pod, State.ASSIGNED, outcome.assignment)
    except Exception:
        ledger.cancel(key)  # the group's booking stands again
        raise
    message = f"group member follows its claims' devices: {outcome.message}"
    logger.info("%s: %s", key, message)
    runtime.events.post(pod.ref, warning=False, reason=translate.ASSIGNED, message=message)
