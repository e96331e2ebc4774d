"""PCI devices from sysfs: where they sit, and how far apart two are; bus ids in one form.

`/sys/bus/pci/devices/<bus id>` links into the device tree, e.g.

    /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0
                 ^host bridge ^root port  ^switch up   ^switch down ^the device

so the path alone is the chain of bridges from the host bridge (the CPU's PCIe root complex,
`pci<domain>:<bus>`) down to the device.

A device's NUMA node is the first answer of
1. its `numa_node`, when >= 0 and a NUMA node we know;
2. its `local_cpulist` (or the `local_cpus` mask), when those CPUs all lie in one NUMA node;
3. the same two for each bridge above it, walking up, then the host bridge's
   `pci_bus/<domain:bus>/cpulistaffinity`;
4. the only NUMA node, on a machine that has one; otherwise unknown (None).

PCIe path class of two devices (`nvidia-smi topo -m` names, narrowest first), with C the deepest
bridge both chains pass through and hops(X) the bridges strictly between C and device X:

    PIX   C exists and hops <= 1 for both: the same bridge, or two downstream ports of one PCIe
          switch (sysfs shows a switch as an upstream port bridge with one downstream port bridge
          per slot; nvidia-smi and NVML_TOPOLOGY_SINGLE call that "a single PCIe switch")
    PXB   C exists but one device is deeper below it (nested switches): several bridges crossed,
          never the host bridge
    PHB   no common bridge, the same host bridge: the traffic turns in the CPU's root complex
    NODE  different host bridges, both devices on the same (known) NUMA node
    SYS   different host bridges on different NUMA nodes, or a locality is unknown
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import PathType
from numatopo_exporter.discovery.errors import DiscoveryError
from numatopo_exporter.discovery.sysfs_files import list_dir, read_cpus, read_optional, read_text

_BUS_ID = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,}:[0-9a-f]{2}$")
_ANY_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?"
    r"(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})\.(?P<fn>[0-7])$"
)


def normalize_bus_id(bus_id: str) -> str:
    """`00000000:1A:00.0` (NVML's form) -> `0000:1a:00.0` (the kernel's, as sysfs, hwloc and NCCL
    print it and the model keeps); no domain means 0; ValueError for what is no PCI address."""
    text = bus_id.strip().lower()
    match = _ANY_BUS_ID.match(text)
    if match is None:
        raise ValueError(f"{bus_id!r} is not a PCI address (expected DDDD:BB:DD.F)")
    domain = int(match["domain"] or "0", 16)
    if domain > 0xFFFF:
        raise ValueError(f"{bus_id!r}: PCI domain {domain:#x} is above 0xffff")
    return f"{domain:04x}:{int(match['bus'], 16):02x}:{int(match['dev'], 16):02x}.{match['fn']}"


def bus_id_key(bus_id: str) -> str:
    """`normalize_bus_id`, or the text stripped and lower-cased when it is no PCI address: the
    form two sources' bus ids are matched in."""
    try:
        return normalize_bus_id(bus_id)
    except ValueError:
        return bus_id.strip().lower()


@dataclass(frozen=True, slots=True)
class PciDevice:
    """One PCI function and where it sits in the device tree."""

    bus_id: str
    """`0000:18:00.0`, as the kernel names it (lower case)."""
    path: str
    """Absolute path of its directory under `<root>/sys/devices`."""
    host_bridge: str
    """The path of its host bridge directory (`.../pci0000:17`): one per root complex."""
    bridges: tuple[str, ...]
    """Bus ids of the bridges above it, host bridge side first (not the device itself)."""


def path_class(a: PciDevice, b: PciDevice, numa_a: int | None, numa_b: int | None) -> PathType:
    """The PCIe path class between two devices (rule in the module docstring)."""
    if a.host_bridge != b.host_bridge:
        if numa_a is not None and numa_a == numa_b:
            return PathType.NODE
        return PathType.SYS
    chain_a = (*a.bridges, a.bus_id)
    chain_b = (*b.bridges, b.bus_id)
    common = 0
    while common < min(len(chain_a), len(chain_b)) and chain_a[common] == chain_b[common]:
        common += 1
    if common == 0:
        return PathType.PHB
    # hops: the bridges strictly between the common bridge and each device.
    hops = max(len(chain_a), len(chain_b)) - common - 1
    return PathType.PIX if hops <= 1 else PathType.PXB


class PciTree:
    """The PCI devices of one sysfs tree: the listing and symlinks read up front, attributes on
    demand and cached (the class code of every device is read, the locality of a few)."""

    def __init__(self, sys_dir: str) -> None:
        self._devices_dir = os.path.join(sys_dir, "devices")
        self.devices: dict[str, PciDevice] = {}
        self.skipped: dict[str, str] = {}
        """Bus id -> why it was left out (unresolvable link, outside the device tree)."""
        self._locality: dict[str, int | None] = {}
        listing = os.path.join(sys_dir, "bus", "pci", "devices")
        for name in sorted(list_dir(listing)):
            try:
                self.devices[name] = self._resolve(os.path.join(listing, name), name)
            except DiscoveryError as exc:
                self.skipped[name] = str(exc)

    def _resolve(self, link: str, bus_id: str) -> PciDevice:
        try:
            target = os.readlink(link)
        except OSError:
            # Not a symlink (a copied tree): the parent chain is unknown.
            return PciDevice(bus_id, link, link, ())
        real = os.path.normpath(os.path.join(os.path.dirname(link), target))
        if not real.startswith(self._devices_dir + os.sep):
            raise DiscoveryError(f"links outside {self._devices_dir} (to {target!r})", link)
        if not os.path.isdir(real):
            raise DiscoveryError(f"dangling symlink (to {target!r})", link)
        parts = real[len(self._devices_dir) + 1 :].split(os.sep)
        for index, part in enumerate(parts):
            if _HOST_BRIDGE.match(part):
                host_bridge = os.path.join(self._devices_dir, *parts[: index + 1])
                bridges = tuple(p for p in parts[index + 1 : -1] if _BUS_ID.match(p))
                return PciDevice(bus_id, real, host_bridge, bridges)
        raise DiscoveryError(f"is not below a PCI host bridge (links to {target!r})", link)

    def read_hex(self, bus_id: str, attribute: str) -> int:
        """`vendor`, `device` or `class` of a device as an integer."""
        path = os.path.join(self.devices[bus_id].path, attribute)
        text = read_text(path)
        try:
            return int(text, 16)
        except ValueError:
            raise DiscoveryError(f"expected a hex number, found {text[:40]!r}", path) from None

    def numa_of(self, bus_id: str, numa_cpus: Mapping[int, CPUSet]) -> int | None:
        """The NUMA node of a device (rule in the module docstring), cached per device."""
        if bus_id not in self._locality:
            self._locality[bus_id] = self._find_numa(self.devices[bus_id], numa_cpus)
        return self._locality[bus_id]

    def _find_numa(self, device: PciDevice, numa_cpus: Mapping[int, CPUSet]) -> int | None:
        # The device first, then each bridge above it, nearest first.
        directory = device.path
        for _ in range(len(device.bridges) + 1):
            if (found := _numa_of_directory(directory, numa_cpus)) is not None:
                return found
            directory = os.path.dirname(directory)
        bus = os.path.basename(device.host_bridge)[3:]
        pci_bus = os.path.join(device.host_bridge, "pci_bus", bus)
        local = read_cpus(pci_bus, "cpulistaffinity", "cpuaffinity")
        if local is not None and (found := _node_holding(local, numa_cpus)) is not None:
            return found
        if len(numa_cpus) == 1:
            return next(iter(numa_cpus))
        return None


def _numa_of_directory(directory: str, numa_cpus: Mapping[int, CPUSet]) -> int | None:
    numa_path = os.path.join(directory, "numa_node")
    numa_text = read_optional(numa_path)
    if numa_text is not None:
        try:
            numa = int(numa_text)
        except ValueError:
            raise DiscoveryError(
                f"expected a NUMA node id or -1, found {numa_text[:40]!r}", numa_path
            ) from None
        if numa >= 0 and numa in numa_cpus:
            return numa
    local = read_cpus(directory, "local_cpulist", "local_cpus")
    return None if local is None else _node_holding(local, numa_cpus)


def _node_holding(cpus: CPUSet, numa_cpus: Mapping[int, CPUSet]) -> int | None:
    """The one NUMA node whose CPUs include all of `cpus`, if there is exactly one."""
    if not cpus:
        return None
    wanted = cpus.ids
    holders = [numa for numa, node_cpus in numa_cpus.items() if wanted <= node_cpus.ids]
    return holders[0] if len(holders) == 1 else None
