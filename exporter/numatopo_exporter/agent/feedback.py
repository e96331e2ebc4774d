"""What the agent tells the pod (pure): the `numatopo.io/Aligned` condition and state.

`numatopo.io/Aligned` is True once every container of the pod runs on exactly its
assigned cpuset, so it can serve as a readiness gate
(`spec.readinessGates: [{conditionType: numatopo.io/Aligned}]`).
"""

from __future__ import annotations

from typing import Any

from numatopo_engine.annotations import ASSIGNMENT, STATE, State

__all__ = ["ALIGNED", "ASSIGNMENT_KEY", "plan_pod_patches"]

ALIGNED = "numatopo.io/Aligned"
ASSIGNMENT_KEY = ASSIGNMENT


def current_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == ALIGNED:
            return dict(condition)
    return None


def plan_pod_patches(
    pod: dict[str, Any], *, aligned: bool, reason: str, message: str, now: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(status patch, metadata patch) to report the outcome; None where nothing changes.

    The condition changes when its status or reason does (the message alone does not
    cause a write); the state annotation becomes `Enforced` or `EnforcementFailed`.
    """
    old = current_condition(pod)
    status = "True" if aligned else "False"
    status_patch = None
    if old is None or old.get("status") != status or old.get("reason") != reason:
        condition = {
            "type": ALIGNED,
            "status": status,
            "reason": reason,
            "message": message[:1000],
            "lastProbeTime": None,
            "lastTransitionTime": now
            if old is None or old.get("status") != status
            else old.get("lastTransitionTime", now),
        }
        others = [
            c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") != ALIGNED
        ]
        status_patch = {"status": {"conditions": [*others, condition]}}
    state = State.ENFORCED if aligned else State.ENFORCEMENT_FAILED
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    meta_patch = None
    if annotations.get(STATE) != state.value:
        meta_patch = {"metadata": {"annotations": {STATE: state.value}}}
    return status_patch, meta_patch
