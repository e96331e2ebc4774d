"""ResourceSlices joined with a node's Numatopology: each DRA device as a GPU, NIC or CPU of the
model (so its NUMA node, PCIe paths and links are known), or as unjoined.

The evidence, strongest first, and `dra-driver-cpu`'s CPUs: docs/DESIGN.md, "GPUs on DRA clusters"
(Join; CPUs from `dra-driver-cpu`). A driver's own attribute names are read in its domain. A device
that two devices claim is left unjoined: numatopo never hands out a device it cannot place.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from numatopo_engine import model
from numatopo_engine.dra.api import Device, DeviceAttribute, ResourceSlice
from numatopo_engine.model import NumatopologySpec

STANDARD_DOMAIN = "resource.kubernetes.io"
_PCI_ATTRIBUTES = (f"{STANDARD_DOMAIN}/pciBusID", "pciBusID", "pcieBusID", "pciAddress")
_NIC_NAMES = ("rdmaDevName", "ifName")


class DeviceKind(enum.StrEnum):
    GPU = "gpu"
    NIC = "nic"
    CPU = "cpu"
    OTHER = "other"  # not joined: the scheduler's alone


@dataclass(frozen=True, slots=True, order=True)
class DeviceId:
    """A device as allocation results name it."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class DraDevice:
    id: DeviceId
    device: Device
    kind: DeviceKind
    gpu: int | None = None  # spec.gpus[].index
    nic: str | None = None  # spec.nics[].name
    cpu: int | None = None  # spec.cpus[].id
    numa: int | None = None
    why: str = ""  # the evidence of the join, or why there is none

    @property
    def plain(self) -> bool:
        """No device field numatopo does not model (taints, counters, binding conditions)."""
        return not self.device.extras()


@dataclass(frozen=True, slots=True)
class DraNode:
    """The DRA devices published for one node, joined with its Numatopology."""

    node: str
    devices: tuple[DraDevice, ...]
    incomplete_pools: tuple[str, ...] = ()  # driver/pool whose slices are not all here

    def by_id(self) -> dict[DeviceId, DraDevice]:
        return {d.id: d for d in self.devices}

    def of_gpu(self) -> dict[int, DraDevice]:
        return {d.gpu: d for d in self.devices if d.gpu is not None}

    def of_nic(self) -> dict[str, DraDevice]:
        return {d.nic: d for d in self.devices if d.nic is not None}

    def of_cpu(self) -> dict[int, DraDevice]:
        return {d.cpu: d for d in self.devices if d.cpu is not None}


def attribute(device: Device, driver: str, name: str) -> DeviceAttribute | None:
    """A device attribute by qualified name (unqualified: in the driver's domain)."""
    qualified = name if "/" in name else f"{driver}/{name}"
    found = device.attributes.get(qualified)
    if found is None and qualified.startswith(f"{driver}/"):
        found = device.attributes.get(qualified.removeprefix(f"{driver}/"))
    return found


def normal_bus_id(text: str) -> str:
    """`0000:18:00.0`, whatever width the domain was written in (NVML writes 8 digits)."""
    text = text.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return text
    try:
        domain = int(parts[0], 16)
    except ValueError:
        return text
    return f"{domain:04x}:{parts[1]}:{parts[2]}"


def _text(device: Device, driver: str, name: str) -> str | None:
    found = attribute(device, driver, name)
    return found.string if found is not None else None


CPU_DRIVER = "dra.cpu"
_NUMA_NODE = f"{STANDARD_DOMAIN}/numaNode"


def _cpu_candidate(device: Device, spec: NumatopologySpec) -> tuple[DeviceKind, int | None, str]:
    ident = attribute(device, CPU_DRIVER, "cpuID")
    if ident is None or ident.number is None:
        return DeviceKind.OTHER, None, "no cpuID (a grouped CPU device)"
    row = next((c for c in spec.cpus if c.id == ident.number), None)
    if row is None or row.numa is None:
        return DeviceKind.OTHER, None, f"CPU {ident.number} is no CPU of a NUMA node of the node"
    numa = attribute(device, CPU_DRIVER, _NUMA_NODE)
    if numa is not None and numa.number != row.numa:
        why = f"CPU {ident.number}: NUMA node {numa.number}, not {row.numa}"
        return DeviceKind.OTHER, None, why
    return DeviceKind.CPU, row.id, f"cpuID {row.id}"


def _candidate(
    device: Device, driver: str, spec: NumatopologySpec, *, by_index: bool
) -> tuple[DeviceKind, int | str | None, str]:
    if driver == CPU_DRIVER:
        return _cpu_candidate(device, spec)
    gpu_bus = {normal_bus_id(g.pci_bus_id): g.index for g in spec.gpus if g.pci_bus_id}
    nic_bus = {normal_bus_id(n.pci_bus_id): n.name for n in spec.nics if n.pci_bus_id}
    buses = [normal_bus_id(t) for name in _PCI_ATTRIBUTES if (t := _text(device, driver, name))]
    for bus in buses:
        if bus in gpu_bus:
            return DeviceKind.GPU, gpu_bus[bus], f"PCI {bus}"
        if bus in nic_bus:
            return DeviceKind.NIC, nic_bus[bus], f"PCI {bus}"
    if buses:
        return DeviceKind.OTHER, None, f"PCI {buses[0]} is no GPU or NIC of the node"
    uuid = _text(device, driver, "uuid")
    for gpu in spec.gpus if uuid else ():
        if gpu.uuid == uuid:
            return DeviceKind.GPU, gpu.index, f"uuid {uuid}"
    for name in _NIC_NAMES:
        value = _text(device, driver, name)
        for nic in spec.nics if value else ():
            if value == nic.name or value in nic.netdevs:
                return DeviceKind.NIC, nic.name, f"{name} {value}"
    index = attribute(device, driver, "index")
    known = index is not None and any(g.index == index.number for g in spec.gpus)
    if by_index and known and index is not None and index.number is not None:
        return DeviceKind.GPU, index.number, f"index {index.number}"
    return DeviceKind.OTHER, None, "no PCI address, uuid or name of the node's GPUs or NICs"


def _complete_pools(
    slices: Iterable[ResourceSlice],
) -> tuple[dict[tuple[str, str], list[ResourceSlice]], list[str]]:
    """Slices by (driver, pool), newest generation only; pools missing slices of it apart (the
    allocator does not allocate from an incomplete pool either)."""
    pools: dict[tuple[str, str], list[ResourceSlice]] = {}
    for piece in slices:
        pools.setdefault((piece.spec.driver, piece.spec.pool.name), []).append(piece)
    complete: dict[tuple[str, str], list[ResourceSlice]] = {}
    incomplete: list[str] = []
    for key, pieces in sorted(pools.items()):
        newest = max(p.spec.pool.generation for p in pieces)
        current = [p for p in pieces if p.spec.pool.generation == newest]
        if len(current) != current[0].spec.pool.resource_slice_count:
            incomplete.append("/".join(key))
            continue
        complete[key] = current
    return complete, incomplete


def join_node(node: str, spec: NumatopologySpec, slices: Iterable[ResourceSlice]) -> DraNode:
    """Join the slices published for `node` (`spec.nodeName` = node) with its spec."""
    local = [s for s in slices if s.spec.node_name == node]
    pools, incomplete = _complete_pools(local)
    by_index = not any(g.pci_bus_id or g.uuid for g in spec.gpus)
    found: list[DraDevice] = []
    for (driver, pool), pieces in pools.items():
        for piece in pieces:
            for device in piece.spec.devices:
                joined = _candidate(device, driver, spec, by_index=by_index)
                found.append(_placed(DeviceId(driver, pool, device.name), device, joined, spec))
    return DraNode(node, tuple(_unshared(found)), tuple(incomplete))


def _placed(
    ident: DeviceId,
    device: Device,
    joined: tuple[DeviceKind, int | str | None, str],
    spec: NumatopologySpec,
) -> DraDevice:
    kind, row, why = joined
    if kind is DeviceKind.GPU and isinstance(row, int):
        numa = next(g.numa for g in spec.gpus if g.index == row)
        return DraDevice(ident, device, kind, gpu=row, numa=numa, why=why)
    if kind is DeviceKind.NIC and isinstance(row, str):
        numa = next(n.numa for n in spec.nics if n.name == row)
        return DraDevice(ident, device, kind, nic=row, numa=numa, why=why)
    if kind is DeviceKind.CPU and isinstance(row, int):
        numa = next(c.numa for c in spec.cpus if c.id == row)
        return DraDevice(ident, device, kind, cpu=row, numa=numa, why=why)
    return DraDevice(ident, device, DeviceKind.OTHER, why=why)


def _unshared(devices: list[DraDevice]) -> list[DraDevice]:
    """Two devices joined to one GPU or NIC: neither can be trusted."""
    counts = Counter(
        (d.kind, d.gpu, d.nic, d.cpu) for d in devices if d.kind is not DeviceKind.OTHER
    )
    why = "is claimed by another device too"
    return [
        DraDevice(d.id, d.device, DeviceKind.OTHER, why=f"{d.why} {why}")
        if d.kind is not DeviceKind.OTHER and counts[(d.kind, d.gpu, d.nic, d.cpu)] > 1
        else d
        for d in devices
    ]


def dra_devices(node: DraNode) -> model.DraDevices | None:
    """The node's joined DRA devices, with a summary per driver and pool (None: none)."""
    joined = [d for d in node.devices if d.kind is not DeviceKind.OTHER]
    if not node.devices:
        return None
    order = [DeviceKind.GPU, DeviceKind.NIC, DeviceKind.CPU, DeviceKind.OTHER]
    counts: dict[str, list[int]] = {}
    for device in node.devices:
        pool = f"{device.id.driver}/{device.id.pool}"
        counts.setdefault(pool, [0, 0, 0, 0])[order.index(device.kind)] += 1
    words = []
    for pool, (gpus, nics, cpus, others) in sorted(counts.items()):
        kinds = ((gpus, "GPUs"), (nics, "NICs"), (cpus, "CPUs"), (others, "not joined"))
        said = [f"{n} {what}" for n, what in kinds if n]
        words.append(f"{pool}: {', '.join(said)}")
    devices = [
        model.DraDevice(
            driver=d.id.driver, pool=d.id.pool, device=d.id.device, gpu=d.gpu, nic=d.nic, cpu=d.cpu
        )
        for d in sorted(joined, key=lambda d: d.id)
    ]
    return model.DraDevices(summary="; ".join(words), devices=devices)
