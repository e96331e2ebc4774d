"""Where a pod's devices come from, read from the pod alone (light: the node agent imports it,
without the engine's numpy or CEL)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def extended_claim_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """`status.extendedResourceClaimStatus` (KEP-5004: the claim kube-scheduler made for the
    extended resources DRA serves the pod; `extended.extended_claim`); {}: none."""
    found = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    return found if isinstance(found, Mapping) and found.get("resourceClaimName") else {}


def dra_served(pod: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """(container, resource) per request mapping of the claim kube-scheduler made for the pod's
    extended resources: the names DRA serves each container on the pod's node. The scheduler maps
    only those the node's allocatable lacks (a device plugin serves the others there, the same name
    included: `nvidia.com/gpu` while a cluster migrates), so the mapping, not the name, says where a
    container's devices come from."""
    mappings = extended_claim_status(pod).get("requestMappings") or ()
    return frozenset(
        (str(m.get("containerName")), str(m.get("resourceName")))
        for m in mappings
        if isinstance(m, Mapping)
    )


def devices_from_claims(pod: Mapping[str, Any], is_device: Callable[[str], bool]) -> bool:
    """Whether the pod's GPUs and NICs come from its ResourceClaims alone (it references claims, or
    DRA serves its extended resources, and asks no device-plugin resource that DRA does not serve
    it, `dra_served`): then it holds exactly its claims' devices, and what device plugins gave
    (nothing) is not compared with it."""
    spec = pod.get("spec") or {}
    if not spec.get("resourceClaims") and not extended_claim_status(pod):
        return False
    served = dra_served(pod)
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        name = str(container.get("name"))
        if any(is_device(str(r)) and (name, str(r)) not in served for r in asked):
            return False
    return True
