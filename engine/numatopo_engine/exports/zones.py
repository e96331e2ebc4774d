"""Per NUMA node: what exists (`capacity`), what may be allocated (`allocatable`), and what numatopo
has not booked (`available`); the amounts, and what the ledger does not see and so does not
subtract: docs/DESIGN.md, "Exports". Devices without a NUMA node belong to no zone.

DRA devices are counted under the names the caller gives them (`DeviceNames`: the extended resources
DeviceClasses serve them as, else `<driver>/<pool>`): under the spec's resource they would promise a
device-plugin pod devices the kubelet cannot give it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numatopo_engine.devices import schedulable_devices
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.quantity import page_bytes
from numatopo_engine.state import NodeState

MANAGED_BY = "numatopo"
"""`app.kubernetes.io/managed-by` on every exported object: how numatopo finds its own."""
MANAGED_LABEL = {"app.kubernetes.io/managed-by": MANAGED_BY}


@dataclass(frozen=True, slots=True)
class Amounts:
    capacity: int
    allocatable: int
    available: int


@dataclass(frozen=True, slots=True)
class NumaZone:
    """One NUMA node's resources; `resources` maps a Kubernetes resource name to amounts."""

    numa: int
    distances: dict[int, int]
    resources: dict[str, Amounts] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceNames:
    """Resource names that replace the spec's for some devices; one with several is counted under
    each (what a pod asking that name can get), and once booked is available under none."""

    gpus: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    """Whole GPU (`spec.gpus[].index`, not in MIG mode) -> its resource names."""
    nics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """NIC (`spec.nics[].name`) -> its resource names."""


def _device_counts(
    spec: NumatopologySpec, state: NodeState, names: DeviceNames
) -> dict[tuple[int, str], list[int]]:
    """(NUMA id, resource) -> [devices, free devices] of the handed-out devices on a NUMA node (a
    GPU in MIG mode only as its MIG devices, as the device plugin advertises it)."""
    counts: dict[tuple[int, str], list[int]] = {}
    free_gpus, free_nics = state.free_gpus(), state.free_nics()
    # A name DRA serves some device as on this node is DRA's there (kube-scheduler sends it to
    # the class's claim where no device plugin lists it): a device left under its spec's name
    # (its driver does not publish it) is none a pod asking that name can get.
    served = {r for found in (*names.gpus.values(), *names.nics.values()) for r in found}
    devices = [
        (d.numa, (d.resource,) if d.parent is not None else names.gpus.get(d.index, (d.resource,)),
         d.index in free_gpus)
        for d in schedulable_devices(spec)
        if d.parent is not None or d.index in names.gpus or d.resource not in served
    ]  # fmt: skip
    devices += [
        (n.numa, names.nics.get(n.name, (n.resource,)), n.name in free_nics)
        for n in spec.nics
        if n.name in names.nics or n.resource not in served
    ]
    for numa, resources, free in devices:
        if numa is None:
            continue
        for resource in resources:
            slot = counts.setdefault((numa, resource), [0, 0])
            slot[0] += 1
            slot[1] += int(free)
    return counts


def numa_zones(
    spec: NumatopologySpec, state: NodeState, names: DeviceNames | None = None
) -> list[NumaZone]:
    """Every NUMA node of `spec` with what `state` leaves available (devices under `names`)."""
    free = state.free_cpus()
    devices = _device_counts(spec, state, names or DeviceNames())
    zones = []
    for node in sorted(spec.numa_nodes, key=lambda n: n.id):
        allocatable = node.cpus - spec.reserved_cpus
        resources = {"cpu": Amounts(len(node.cpus), len(allocatable), len(free & node.cpus))}
        resources["memory"] = Amounts(
            node.memory_bytes, node.memory_bytes, max(state.free_memory(node.id), 0)
        )
        sizes = [(page_bytes(size), size, pages) for size, pages in node.hugepages.items()]
        for page, size, pages in sorted(sizes):
            if page and pages:
                left = max(state.free_hugepages(node.id, size), 0)
                resources[f"hugepages-{size}"] = Amounts(page * pages, page * pages, left)
        for (numa, resource), (count, unbooked) in sorted(devices.items()):
            if numa == node.id:
                resources[resource] = Amounts(count, count, unbooked)
        zones.append(NumaZone(node.id, {int(k): v for k, v in node.distances.items()}, resources))
    return zones
