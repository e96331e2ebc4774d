"""Which devices of the node the kubelet cannot hand out now (pure): PodResources'
`GetAllocatableResources` listing judged by the rule of docs/DESIGN.md, "The CRD", "Device health"
(per resource: the devices its listed IDs leave out; no verdict when no ID names a device here; all
of them when the resource is not listed)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

from numatopo_engine.device_ids import gpu_indices, nic_names
from numatopo_engine.devices import schedulable_devices
from numatopo_engine.model import NumatopologySpec, UnhealthyDevices

T = TypeVar("T", int, str)  # a device index or a NIC name


def unhealthy_devices(
    spec: NumatopologySpec, allocatable: Mapping[str, Collection[str]]
) -> UnhealthyDevices:
    """The devices of `spec` the kubelet's `allocatable` listing (resource -> IDs) leaves out."""
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
