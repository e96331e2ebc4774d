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


def devices_from_claims(pod: Mapping[str, Any], is_device: Callable[[str], bool]) -> bool:
    """Whether the pod's GPUs and NICs come from its ResourceClaims alone (it references claims, or
    DRA serves its extended resources, and asks no device-plugin resource): then it holds exactly
    its claims' devices, and what device plugins gave (nothing) is not compared with it."""
    spec = pod.get("spec") or {}
    if not spec.get("resourceClaims") and not extended_claim_status(pod):
        return False
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        if any(is_device(str(name)) for name in asked):
            return False
    return True
