"""Follow: compare the GPUs and NICs a container really holds with its assignment, and tell the
node's devices the kubelet cannot hand out (pure).

What the kubelet gave (PodResources) goes into `numatopo.io/observed`, per container with whether it
matches (docs/DESIGN.md, "GPUs: steered, followed or unverified"). RDMA NICs are compared only where
their device IDs name the node's NICs (`nic_names`; a shared pool's IDs name none). Only app
containers and sidecars are compared: a regular init container has finished before they run, and
GPUs an app container reuses from one (the kubelet's rule) count as the app container's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from itertools import zip_longest
from typing import Any, TypeVar

from numatopo_engine.annotations import Assignment, ContainerAssignment, Observed, ObservedContainer
from numatopo_engine.device_ids import device_ids_for, gpu_indices, nic_names
from numatopo_engine.devices import schedulable_devices
from numatopo_engine.model import Nic, NumatopologySpec, UnhealthyDevices
from numatopo_engine.quantity import QuantityError, parse_milli
from numatopo_exporter.agent.pod_view import PodView
from numatopo_exporter.steering.choice import InFlight, containers_in_flight


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
    is_nic: Callable[[str], bool] = lambda _: False,
    nics: Sequence[Nic] = (),
) -> Observed | None:
    """What the pod's `containers` hold, compared with `assignment` (NICs by the node's `nics`);
    None while the kubelet has not allocated them yet (the pod unlisted, or a container assigned
    GPUs holding none: PodResources lists a pod before its admission has finished)."""
    if held is None:
        return None
    observed: dict[str, ObservedContainer] = {}
    for name in sorted(containers):
        assigned = assignment.containers.get(name)
        devices = {r: list(ids) for r, ids in sorted((held.get(name) or {}).items()) if ids}
        gpu_ids = ObservedContainer(devices=devices).gpu_ids(is_gpu)
        names, indices = _assigned_devices(assigned)
        wants_gpus = bool(indices or names)
        if wants_gpus and not gpu_ids:
            return None
        if not devices and not wants_gpus:
            continue
        matches = True
        if assigned is not None and (wants_gpus or gpu_ids):
            mapped = device_ids_for(names, indices, gpu_ids)
            matches = mapped is not None and len(gpu_ids) == len(names)
        if assigned is not None and matches:
            matches = _same_nics(assigned.nics, _nic_ids(devices, is_nic), nics)
        observed[name] = ObservedContainer(devices=devices, matches=matches)
    return Observed(seq=assignment.seq, containers=observed)


def _nic_ids(devices: Mapping[str, list[str]], is_nic: Callable[[str], bool]) -> list[str]:
    return [d for resource, ids in devices.items() if is_nic(resource) for d in ids]


def _same_nics(assigned: Sequence[str], held_ids: Sequence[str], nics: Sequence[Nic]) -> bool:
    """False only when the held IDs name NICs, and not the assigned ones."""
    if not held_ids:
        return True
    held = nic_names(held_ids, nics)
    return held is None or sorted(held) == sorted(assigned)


def _assigned_devices(assigned: ContainerAssignment | None) -> tuple[list[str], list[int]]:
    """The names and indices of the devices a container was assigned: whole GPUs, then MIG
    devices (the plugin names those by their MIG UUID)."""
    if assigned is None:
        return [], []
    whole = assigned.gpus or [""] * len(assigned.gpu_indices)
    mig = assigned.mig or [""] * len(assigned.mig_indices)
    return [*whole, *mig], [*assigned.gpu_indices, *assigned.mig_indices]


def gpu_words(
    observed: Observed,
    assignment: Assignment,
    is_gpu: Callable[[str], bool],
    is_nic: Callable[[str], bool] = lambda _: False,
) -> str:
    """`container x holds GPUs [...] but was assigned [...]` per mismatch, with NICs if any."""
    parts = []
    for name in observed.mismatched:
        found = observed.containers[name]
        held = found.gpu_ids(is_gpu)
        assigned = assignment.containers.get(name)
        names, indices = _assigned_devices(assigned)
        named = [name or str(index) for name, index in zip_longest(names, indices, fillvalue="")]
        words = f"container {name} holds GPUs {held} but was assigned {named}"
        if held_nics := _nic_ids(found.devices, is_nic):
            given = assigned.nics if assigned is not None else []
            words += f", NICs {held_nics} but was assigned {given}"
        parts.append(words)
    return "; ".join(parts)


def in_flight(
    pods: Iterable[PodView], node_name: str, is_gpu: Callable[[str], bool] = lambda _: True
) -> list[InFlight]:
    """The containers of this node's pods that were assigned GPUs: the candidates of the steering
    plugin's answer, in the kubelet's admission order (`steering.choice`); the agent leaves out
    those PodResources already lists with devices.

    A regular init container runs before the containers after it and hands its GPUs on: the kubelet
    gives the next container asking for GPUs (a sidecar, an app container, another init container)
    the init container's GPUs first and asks the plugin only for the rest, naming those as
    must-include. So an init container asking `k` GPUs is steered to the first `k` GPUs that next
    container will hold, which then ends up with exactly its own; when it asks fewer than `k`, the
    kubelet hands it a random part of them: unsteerable, left to Follow."""
    found: list[InFlight] = []
    for pod in pods:
        assignment = pod.assignment
        if assignment is None or pod.finished or pod.deleting:
            continue
        if pod.node_name != node_name or assignment.node != node_name:
            continue  # an assignment for another node names GPUs another pod may hold here
        uid, key, created = pod.uid, pod.key, pod.created
        spec = pod.body.get("spec") or {}
        inits = list(spec.get("initContainers") or [])
        names = [str(c.get("name")) for c in inits]
        names += [str(c.get("name")) for c in spec.get("containers") or []]
        claims = {
            c.container: c for c in containers_in_flight(uid, key, created, names, assignment)
        }
        regular = {str(c.get("name")) for c in inits if c.get("restartPolicy") != "Always"}
        # Back to front: a regular init container is steered to what the next GPU container holds.
        following: InFlight | None = None
        for order, name in reversed(list(enumerate(names))):
            if name not in regular:
                following = claims.get(name) or following
                continue
            claims.pop(name, None)  # its own entry books only the excess: not what it gets
            wanted = _gpu_count(inits[order], is_gpu)
            if not wanted:
                continue
            host = following if following is not None and len(following.gpus) >= wanted else None
            steered = None if host is None else InFlight(
                uid, key, created, name, order, host.gpus[:wanted], host.gpu_indices[:wanted],
                assignment.seq,
            )  # fmt: skip
            if steered is not None:
                claims[name] = steered
            following = steered
        found += sorted(claims.values(), key=lambda c: c.container_order)
    return found


def _gpu_count(container: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> int:
    resources = container.get("resources") or {}
    asked = resources.get("limits") or resources.get("requests") or {}
    total = 0
    for name, value in asked.items():
        if is_gpu(str(name)):
            try:
                total += parse_milli(value) // 1000
            except QuantityError:
                continue
    return total


T = TypeVar("T", int, str)  # a device index or a NIC name


def unhealthy_devices(
    spec: NumatopologySpec, allocatable: Mapping[str, Collection[str]]
) -> UnhealthyDevices:
    """The devices of `spec` the kubelet's `allocatable` listing (PodResources'
    `GetAllocatableResources`: resource -> IDs) leaves out (docs/DESIGN.md, "Device health")."""
    gpus = _unhealthy(
        allocatable,
        [(d.resource, d.index) for d in schedulable_devices(spec)],
        lambda i: gpu_indices([i], spec.gpus),
    )
    nics = _unhealthy(
        allocatable, [(n.resource, n.name) for n in spec.nics], lambda i: nic_names([i], spec.nics)
    )
    return UnhealthyDevices(gpus=sorted(gpus), nics=nics)


def _unhealthy(
    allocatable: Mapping[str, Collection[str]],
    mine: Sequence[tuple[str, T]],
    names: Callable[[str], Sequence[T] | None],
) -> list[T]:
    """Per resource of `mine` ((resource, device) pairs), the devices its listed IDs do not name;
    none when it has no verdict (listed, but no ID names anything here)."""
    found: list[T] = []
    for resource in sorted({r for r, _ in mine}):
        listed: set[T] = set()
        for device_id in allocatable.get(resource, ()):
            listed.update(names(device_id) or ())
        if listed or resource not in allocatable:
            found += sorted(d for r, d in mine if r == resource and d not in listed)
    return found
