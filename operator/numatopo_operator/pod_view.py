"""`slim_pod`: the part of a pod numatopo reads, cut out before anything keeps it (pure).

A pod as the API serves it is mostly what numatopo never reads: managed fields, the
last applied configuration, volumes, each container's command, environment, probes and
mounts. At 150,000 pods those bodies are gigabytes; the slim view keeps metadata
(without managed fields and the last applied configuration), the whole spec but its
volumes, each container's name, resources and restart policy (what `request_from_pod`
sizes), and of the status the phase, start time and container names (`is_admitted`,
`is_finished`) and the claims made from its templates (`dra`). Every other part of
the operator reads the same keys either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["slim_pod"]

_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "annotations",
    "ownerReferences",
)
_CONTAINER = ("name", "resources", "restartPolicy")
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_SPEC_DROPPED = ("volumes", *_CONTAINER_LISTS)
# `resourceClaimStatuses`: the names of the claims made from the pod's templates (`dra`).
_STATUS = ("phase", "startTime", "nominatedNodeName", "resourceClaimStatuses")
# Written by `kubectl apply`: a second copy of the whole manifest.
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _picked(found: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: found[name] for name in names if name in found}


def _containers(found: object) -> list[Any]:
    if not isinstance(found, list):
        return []
    return [_picked(c, _CONTAINER) if isinstance(c, Mapping) else c for c in found]


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The slim view of `pod` (a new dict; `pod` is left as it is)."""
    view: dict[str, Any] = _picked(pod, ("apiVersion", "kind"))
    metadata = pod.get("metadata")
    if isinstance(metadata, Mapping):
        kept = _picked(metadata, _METADATA)
        annotations = kept.get("annotations")
        if isinstance(annotations, Mapping) and _LAST_APPLIED in annotations:
            kept["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
        view["metadata"] = kept
    spec = pod.get("spec")
    if isinstance(spec, Mapping):
        kept = {k: v for k, v in spec.items() if k not in _SPEC_DROPPED}
        for name in _CONTAINER_LISTS:
            if name in spec:
                kept[name] = _containers(spec[name])
        view["spec"] = kept
    status = pod.get("status")
    if isinstance(status, Mapping):
        kept = _picked(status, _STATUS)
        statuses = status.get("containerStatuses")
        if isinstance(statuses, list) and statuses:
            kept["containerStatuses"] = [
                _picked(s, ("name",)) if isinstance(s, Mapping) else s for s in statuses
            ]
        view["status"] = kept
    return view
