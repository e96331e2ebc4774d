"""Follow: compare the GPUs a container really holds with its assignment (pure).

The kubelet's device manager, not numatopo, hands out devices. On a node where nothing
steers it, the GPUs a container gets may differ from those its assignment names; CPUs
and memory pinned next to the named GPUs would then sit on the wrong NUMA node. The
agent reads what the kubelet gave (PodResources), writes it into
`numatopo.io/observed` with, per container, whether it matches; the operator decides
again with those GPUs fixed, and the agent enforces the new assignment.

Only app containers and sidecars are compared: a regular init container has finished
before they run, and when an app container reuses some of an init container's GPUs
(the kubelet's rule) it is the app container's GPUs that count.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from numatopo_engine.annotations import Assignment, Observed, ObservedContainer
from numatopo_engine.device_ids import device_ids_for

__all__ = ["gpu_words", "observe", "running_container_names"]


def running_container_names(pod: Mapping[str, Any]) -> set[str]:
    """App containers and sidecars (restartable init containers) of the pod spec."""
    spec = pod.get("spec") or {}
    names = {str(c.get("name")) for c in spec.get("containers") or []}
    names |= {
        str(c.get("name"))
        for c in spec.get("initContainers") or []
        if c.get("restartPolicy") == "Always"
    }
    return names


def observe(
    assignment: Assignment,
    held: Mapping[str, Mapping[str, list[str]]] | None,
    *,
    containers: Collection[str],
    is_gpu: Callable[[str], bool],
) -> Observed | None:
    """What the pod's `containers` hold, compared with `assignment`; None while the
    kubelet has not allocated them yet (the pod unlisted, or a container assigned GPUs
    holding none: PodResources lists a pod before its admission has finished)."""
    if held is None:
        return None
    observed: dict[str, ObservedContainer] = {}
    for name in sorted(containers):
        assigned = assignment.containers.get(name)
        devices = {r: list(ids) for r, ids in sorted((held.get(name) or {}).items()) if ids}
        gpu_ids = [d for r, ids in devices.items() if is_gpu(r) for d in ids]
        wants_gpus = assigned is not None and bool(assigned.gpus or assigned.gpu_indices)
        if wants_gpus and not gpu_ids:
            return None
        if not devices and not wants_gpus:
            continue
        matches = True
        if assigned is not None and (wants_gpus or gpu_ids):
            names = assigned.gpus or [""] * len(assigned.gpu_indices)
            mapped = device_ids_for(names, assigned.gpu_indices, gpu_ids)
            matches = mapped is not None and len(gpu_ids) == len(names)
        observed[name] = ObservedContainer(devices=devices, matches=matches)
    return Observed(seq=assignment.seq, containers=observed)


def gpu_words(observed: Observed, assignment: Assignment, is_gpu: Callable[[str], bool]) -> str:
    """`container x holds GPUs [...] but was assigned [...]` for each mismatch."""
    parts = []
    for name in observed.mismatched:
        devices = observed.containers[name].devices
        held = [d for r, ids in devices.items() if is_gpu(r) for d in ids]
        assigned = assignment.containers.get(name)
        named = (assigned.gpus or [str(i) for i in assigned.gpu_indices]) if assigned else []
        parts.append(f"container {name} holds GPUs {held} but was assigned {named}")
    return "; ".join(parts)
