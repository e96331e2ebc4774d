"""What the agent tells the pod (pure): the `numatopo.io/Aligned` condition and state.

`numatopo.io/Aligned` is True once every container of the pod runs on exactly its assigned cpuset,
so it can serve as a readiness gate (`spec.readinessGates: [{conditionType: numatopo.io/Aligned}]`).

The kubelet writes `Ready` & co. into the same `status.conditions`, and the agent's copy of the pod
may be older than its last write, so the agent's patch never carries another condition:
  * the condition at index i of the agent's copy: a JSON patch that tests that
    `/status/conditions/i/type` is still ours, then replaces entry i (if the list was reordered
    meanwhile, the test fails and the caller retries on a fresh copy);
  * a list without it: a JSON patch appending to the list (`/-`);
  * no list: a strategic-merge patch holding only our condition (merged by its key `type`).

Not a strategic-merge patch (or server-side apply) always: right on a real API server, but the API
emulator the tests run against (kmock) merges lists by replacing them, hiding the very overwrite
this avoids. A JSON patch (RFC 6902) means the same on both.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from numatopo_engine.annotations import STATE, State
from numatopo_kube import JSON_PATCH, STRATEGIC_MERGE_PATCH

ALIGNED = "numatopo.io/Aligned"


def now_text(now: float) -> str:
    """A condition's or status's time, as the API writes it (seconds, UTC)."""
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# The API server refuses condition messages over 32 KiB; Events cut at 1 KiB. Keep the
# condition readable in `kubectl describe` as well.
MESSAGE_LIMIT = 1000


@dataclass(frozen=True)
class StatusPatch:
    """A PATCH body for `pods/<name>/status` and its content type."""

    body: Any
    content_type: str


def _conditions(pod: dict[str, Any]) -> list[dict[str, Any]] | None:
    conditions = (pod.get("status") or {}).get("conditions")
    return conditions if isinstance(conditions, list) else None


def current_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    found = next((c for c in _conditions(pod) or [] if c.get("type") == ALIGNED), None)
    return None if found is None else dict(found)


def plan_status_patch(condition: dict[str, Any], pod: dict[str, Any]) -> StatusPatch:
    """The patch that writes `condition` and only it, given the pod as last seen."""
    conditions = _conditions(pod)
    if conditions is None:
        return StatusPatch({"status": {"conditions": [condition]}}, STRATEGIC_MERGE_PATCH)
    for index, existing in enumerate(conditions):
        if existing.get("type") == ALIGNED:
            where = f"/status/conditions/{index}"
            ops = [
                {"op": "test", "path": f"{where}/type", "value": ALIGNED},
                {"op": "replace", "path": where, "value": condition},
            ]
            return StatusPatch(ops, JSON_PATCH)
    return StatusPatch(
        [{"op": "add", "path": "/status/conditions/-", "value": condition}], JSON_PATCH
    )


def plan_condition(
    pod: dict[str, Any], *, aligned: bool, reason: str, message: str, now: str
) -> dict[str, Any] | None:
    """The `Aligned` condition to write; None when nothing a reader relies on changed: a
    failure's message alone causes no write (its details vary from pass to pass), a success's
    does (it names the cpusets applied)."""
    old = current_condition(pod)
    status = "True" if aligned else "False"
    if (
        old is not None
        and old.get("status") == status
        and old.get("reason") == reason
        and (not aligned or old.get("message") == message[:MESSAGE_LIMIT])
    ):
        return None
    return {
        "type": ALIGNED,
        "status": status,
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "lastProbeTime": None,
        "lastTransitionTime": now
        if old is None or old.get("status") != status
        else old.get("lastTransitionTime", now),
    }


def plan_pod_patches(
    pod: dict[str, Any], *, aligned: bool, reason: str, message: str, now: str
) -> tuple[StatusPatch | None, dict[str, str] | None]:
    """(status patch, annotations to set) to report the outcome, the state annotation becoming
    `Enforced` or `EnforcementFailed`; None where nothing changes."""
    condition = plan_condition(pod, aligned=aligned, reason=reason, message=message, now=now)
    status_patch = None if condition is None else plan_status_patch(condition, pod)
    state = State.ENFORCED if aligned else State.ENFORCEMENT_FAILED
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(STATE) == state.value:
        return status_patch, None
    return status_patch, {STATE: state.value}


def already_enforced(pod: dict[str, Any], *, message: str) -> bool:
    """Whether the pod already says it is enforced with exactly these cpusets (`message`
    is the summary of what is applied): then a restarted agent has nothing new to tell."""
    condition = current_condition(pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return (
        annotations.get(STATE) == State.ENFORCED.value
        and condition is not None
        and condition.get("status") == "True"
        and condition.get("message") == message[:MESSAGE_LIMIT]
    )
