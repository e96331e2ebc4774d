"""Which devices of the node the kubelet cannot hand out now (pure).

The kubelet's PodResources `GetAllocatableResources` lists the healthy devices of every
registered device plugin, by the plugin's IDs: a device its plugin reports `Unhealthy`
(ListAndWatch) is left out, and so is every device of a plugin that is gone (the
kubelet marks all of them unhealthy). With the steering plugin in between, its
ListAndWatch relays NVIDIA's, so the same listing holds.

Per resource of the spec's devices:

* listed, and some of its IDs name devices of this node: the devices none names are
  unhealthy;
* listed, and none of its IDs names a device here (a shared RDMA pool, IDs of another
  scheme): no verdict, every device counts;
* not listed at all: none is healthy (its plugin is down, or never registered), so all
  of them are unhealthy.
"""

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
    """The devices of `spec` the kubelet's `allocatable` listing (resource -> device
    plugin IDs) does not offer."""
    gpus: list[int] = []
    devices = schedulable_devices(spec)
    for resource in sorted({d.resource for d in devices}):
        mine = sorted(d.index for d in devices if d.resource == resource)
        listed = _named(allocatable, resource, lambda i: gpu_indices([i], spec.gpus))
        if listed is not None:
            gpus += [index for index in mine if index not in listed]
    nics: list[str] = []
    for resource in sorted({n.resource for n in spec.nics}):
        mine_nics = sorted(n.name for n in spec.nics if n.resource == resource)
        named = _named(allocatable, resource, lambda i: nic_names([i], spec.nics))
        if named is not None:
            nics += [name for name in mine_nics if name not in named]
    return UnhealthyDevices(gpus=sorted(gpus), nics=nics)


def _named(
    allocatable: Mapping[str, Collection[str]],
    resource: str,
    names: Callable[[str], Sequence[T] | None],
) -> set[T] | None:
    """What the IDs listed under `resource` name; None when there is no verdict (listed,
    but no ID names anything here); empty when the resource is not listed."""
    if resource not in allocatable:
        return set()
    found: set[T] = set()
    for device_id in allocatable[resource]:
        found.update(names(device_id) or ())
    return found or None
