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

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from numatopo_engine.annotations import ASSIGNMENT, Assignment, Observed, ObservedContainer
from numatopo_engine.device_ids import device_ids_for
from numatopo_exporter.steering.choice import InFlight, containers_in_flight

__all__ = ["gpu_words", "in_flight", "observe", "running_container_names"]


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


_DONE = frozenset({"Succeeded", "Failed"})


def in_flight(
    pods: Iterable[Mapping[str, Any]],
    holdings: Mapping[tuple[str, str], Mapping[str, Mapping[str, list[str]]]],
    node_name: str,
) -> list[InFlight]:
    """The containers of this node's pods that were assigned GPUs and hold none yet (as
    PodResources last listed them): the candidates of the steering plugin's answer, in
    the kubelet's admission order (`steering.choice`)."""
    found: list[InFlight] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        text = (meta.get("annotations") or {}).get(ASSIGNMENT)
        if not isinstance(text, str) or spec.get("nodeName") != node_name:
            continue
        if (pod.get("status") or {}).get("phase") in _DONE or meta.get("deletionTimestamp"):
            continue
        try:
            assignment = Assignment.model_validate_json(text)
        except ValidationError:
            continue
        held = holdings.get((str(meta.get("namespace", "")), str(meta.get("name", "")))) or {}
        names = [str(c.get("name")) for c in spec.get("initContainers") or []]
        names += [str(c.get("name")) for c in spec.get("containers") or []]
        found += [
            candidate
            for candidate in containers_in_flight(
                str(meta.get("uid", "")),
                f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                str(meta.get("creationTimestamp", "")),
                names,
                assignment,
            )
            if not any(held.get(candidate.container, {}).values())
        ]
    return found
