"""A pod's claims as kube-scheduler allocated them (in PreBind), read as the devices of its
containers for the extender's `/bind` (pure): docs/DESIGN.md, "GPUs on DRA clusters", "Its bind
follows the claims". Devices go to containers as `decide_claims` hands them out, those of the claim
made for extended resources as its mapping says (`extended.extended_claim`); what cannot be read
that way raises `NotFollowedError`, and the pod is decided from its requests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from numatopo_engine.cpuset import CPUSet
from numatopo_engine.dra.claims import PodClaim, claiming, restricted_to
from numatopo_engine.dra.extended import EXTENDED_ENTRY
from numatopo_engine.dra.join import DeviceId, DraNode
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.request import PodRequest
from numatopo_engine.state import NodeState


class NotFollowedError(Exception):
    """The claims' allocation cannot be followed: decide from the pod's requests."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """What the pod's allocated claims give its containers on one node."""

    request: PodRequest
    """The pod's request with each claiming container's GPUs, NICs and CPUs counted."""
    gpus: dict[str, list[int]] = field(default_factory=dict)
    nics: dict[str, list[str]] = field(default_factory=dict)
    cpus: dict[str, CPUSet] = field(default_factory=dict)

    def around(self, state: NodeState) -> NodeState:
        """`state` with, where claims hold CPUs, every other free CPU booked away: the claimed CPUs
        are the only ones the decision may give (the driver pins them)."""
        if not self.cpus:
            return state
        claimed = set().union(*self.cpus.values())
        return restricted_to(state, state.free_gpus(), state.free_nics(), claimed)


def allocation_results(raw: Mapping[str, Any]) -> list[tuple[str, DeviceId]] | None:
    """(request, device) per result of a claim's `status.allocation`; None when it is not allocated.
    Read field by field: whatever else the allocator wrote, these name the devices."""
    allocation = (raw.get("status") or {}).get("allocation")
    if not isinstance(allocation, Mapping):
        return None
    found = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if not isinstance(result, Mapping):
            continue
        driver, pool, device = (result.get(k) for k in ("driver", "pool", "device"))
        if isinstance(driver, str) and isinstance(pool, str) and isinstance(device, str):
            found.append((str(result.get("request")), DeviceId(driver, pool, device)))
    return found


def _not_the_pods(entry: PodClaim, raw: Mapping[str, Any], uid: str) -> str | None:
    """Why claim `raw` is not the pod's (uid `uid`) to follow; None when it is. By bind
    time kube-scheduler's PreBind has reserved every claim of the pod for it, and the
    claim it made for the pod's extended resources is owned by the pod (controller
    reference): a pod status naming another pod's claim is not followed, so it never
    takes that pod's devices. A pod without a uid has no claim."""
    if not uid:
        return f"claim {entry.claim} is not reserved for this pod (it has no uid)"
    if entry.name == EXTENDED_ENTRY and not any(
        isinstance(ref, Mapping)
        and ref.get("kind") == "Pod"
        and ref.get("controller") is True
        and ref.get("uid") == uid
        for ref in (raw.get("metadata") or {}).get("ownerReferences") or ()
    ):
        return f"claim {entry.claim} is not owned by this pod"
    reserved = (raw.get("status") or {}).get("reservedFor") or ()
    if not any(isinstance(c, Mapping) and c.get("uid") == uid for c in reserved):
        return f"claim {entry.claim} is not reserved for this pod"
    return None


def claimed_devices(
    topology: NumatopologySpec,
    base: PodRequest,
    entries: Sequence[PodClaim],
    claims: Mapping[str, Mapping[str, Any]],
    node: DraNode,
    *,
    uid: str,
) -> Claimed:
    """The devices the pod's (uid `uid`) allocated `claims` (name -> raw claim) give its containers
    on `node`. Raises `NotFollowedError` when a claim is missing, not allocated or not the pod's
    (`_not_the_pods`), names a device `node` does not publish, or the claims and requests do not
    add up."""
    if not base.containers:
        raise NotFollowedError("the pod has no containers")
    by_id = node.by_id()
    pools = {(d.id.driver, d.id.pool) for d in node.devices}
    gpus: dict[str, list[int]] = {}
    nics: dict[str, list[str]] = {}
    cpus: dict[str, set[int]] = {}
    for entry in entries:
        raw = claims.get(entry.claim or "")
        if raw is None:
            raise NotFollowedError(f"claim {entry.claim or entry.name} does not exist yet")
        results = allocation_results(raw)
        if results is None:
            raise NotFollowedError(f"claim {entry.claim} is not allocated yet")
        refused = _not_the_pods(entry, raw, uid)
        if refused is not None:
            raise NotFollowedError(refused)
        default = entry.containers[0] if entry.containers else base.containers[0].name
        for request, found in results:
            container = dict(entry.requests).get(request, default)
            device = by_id.get(found)
            if device is None:
                known = (found.driver, found.pool) in pools
                where = "publishes no such device" if known else "does not publish its pool"
                raise NotFollowedError(
                    f"claim {entry.claim} holds {found}; node {node.node} {where}"
                )
            if device.gpu is not None and device.gpu not in gpus.get(container, []):
                gpus.setdefault(container, []).append(device.gpu)
            if device.nic is not None and device.nic not in nics.get(container, []):
                nics.setdefault(container, []).append(device.nic)
            if device.cpu is not None:
                cpus.setdefault(container, set()).add(device.cpu)
    stray = sorted((gpus.keys() | nics.keys() | cpus.keys()) - {c.name for c in base.containers})
    if stray:
        raise NotFollowedError(f"claims are used by {', '.join(stray)}, no app container")
    gpu_resource = {g.index: g.resource for g in topology.gpus}
    nic_resource = {n.name: n.resource for n in topology.nics}
    containers = [
        claiming(
            c,
            NotFollowedError,
            gpus=len(gpus.get(c.name, [])),
            nics=len(nics.get(c.name, [])),
            cpus=len(cpus.get(c.name, ())),
            gpu_resources={gpu_resource[g] for g in gpus.get(c.name, [])},
            nic_resources={nic_resource[n] for n in nics.get(c.name, [])},
        )
        for c in base.containers
    ]
    return Claimed(
        dataclasses.replace(base, containers=tuple(containers)),
        {k: sorted(v) for k, v in gpus.items()},
        {k: sorted(v) for k, v in nics.items()},
        {k: CPUSet(v) for k, v in cpus.items()},
    )
