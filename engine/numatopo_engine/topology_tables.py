"""Per-shape lookup tables the allocation hot path reads instead of the pydantic spec.

A node's *shape* decides (CPUs per core and NUMA node, GPU-to-NUMA, links, PCIe paths, memory); its
*names* (node name, GPU and MIG UUIDs, PCI bus ids, NIC names) decide nothing. `Tables` holds the
shape only, shared by every node of that shape; names are attached from the node's own spec when an
assignment is written (`node_names`). NIC position i is the node's i-th NIC in name order, so ties
broken by position are broken as by name on every node.

A caller's `TableCache` builds tables once per shape, keyed by `shape_key` (a digest of the
identity-free spec), and keeps a bounded number (an evicted shape is built again, never mistaken for
another). Tables hold hardware facts only, never memos.

Pools, in the kubelet's words: *allocatable* CPUs are online and not reserved; only they are ever
handed out or counted as capacity.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from numatopo_engine.devices import schedulable_devices
from numatopo_engine.model import NumatopologySpec, PathType
from numatopo_engine.numamask import LOCAL_DISTANCE
from numatopo_engine.quantity import parse_bytes

# Rank used for a GPU-NIC pair with no known PCIe path: farther than SYS.
NO_PATH_RANK = len(PathType)
# Shapes a `TableCache` keeps by default: more than a real fleet has.
DEFAULT_SHAPES = 256


@dataclass(frozen=True, slots=True)
class Tables:
    key: str  # `shape_key` of the specs these were built from
    numa_ids: tuple[int, ...]
    cpu_numa: dict[int, int]
    cpu_core: dict[int, int]
    core_threads: dict[int, tuple[int, ...]]  # allocatable threads of each core, ascending
    whole_cores: frozenset[int]  # cores with every online thread allocatable
    numa_allocatable: dict[int, frozenset[int]]  # allocatable CPUs per NUMA node
    socket_allocatable: dict[int, frozenset[int]]
    threads_per_core: int
    memory_numa_ids: tuple[int, ...]  # NUMA nodes that serve pod memory
    memory_capacity: dict[int, int]  # bytes, over memory_numa_ids
    cpu_capacity: dict[int, int]  # allocatable CPUs per NUMA node that has any
    numa_hugepages: dict[tuple[int, str], int]  # bytes
    # "GPUs" below are the devices handed out (`devices`): whole GPUs and MIG devices.
    gpu_numa: dict[int, int | None]  # None: not NUMA-local (or on an unknown node)
    gpu_resource: dict[int, str]
    gpu_bandwidth: dict[tuple[int, int], float]  # both orders; never a GPU in MIG mode
    mig_parent: dict[int, int]  # MIG device index -> its GPU's index
    nic_numa: dict[int, int | None]  # by NIC position (the node's NICs in name order)
    nic_resource: dict[int, str]
    pci_rank: dict[tuple[int, int], int]  # (device, NIC position)
    distances: dict[tuple[int, int], int]
    numa_online: dict[int, int] = field(default_factory=dict)  # online CPUs, reserved too


@dataclass(frozen=True, slots=True)
class NodeNames:
    """One node's identity: what its assignments call its devices."""

    gpu_name: dict[int, str]  # device index -> uuid, else PCI bus id, else GPU-<index>
    nic_name: tuple[str, ...]  # NIC position -> name
    nic_position: dict[str, int]


def node_names(spec: NumatopologySpec) -> NodeNames:
    nics = tuple(sorted({n.name for n in spec.nics}))
    return NodeNames(
        gpu_name={d.index: d.name for d in schedulable_devices(spec)},
        nic_name=nics,
        nic_position={name: i for i, name in enumerate(nics)},
    )


def shape_key(spec: NumatopologySpec) -> str:
    """A digest of `spec` without its names: equal for nodes of equal hardware."""
    wire: dict[str, Any] = spec.to_wire()
    position = {name: i for i, name in enumerate(sorted({n.name for n in spec.nics}))}
    for gpu in wire.get("gpus", ()):
        gpu.pop("uuid", None)
        gpu.pop("pciBusId", None)
        for device in gpu.get("migDevices") or ():
            device.pop("uuid", None)
    nics = wire.get("nics", ())
    for nic in nics:
        nic["name"] = position[nic["name"]]
        nic.pop("pciBusId", None)
        nic.pop("netdevs", None)
    wire["nics"] = sorted(nics, key=lambda n: int(n["name"]))
    paths = wire.get("pciPaths", ())
    for path in paths:
        path["nic"] = position[path["nic"]]
    wire["pciPaths"] = sorted(paths, key=lambda p: (p["gpu"], p["nic"]))
    wire.pop("sources", None)
    text = json.dumps(wire, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class TableCache:
    """Tables built once per hardware shape, the `size` most recently used kept."""

    def __init__(self, size: int = DEFAULT_SHAPES) -> None:
        self.size = max(1, size)
        self._by_key: OrderedDict[str, Tables] = OrderedDict()

    def get(self, spec: NumatopologySpec, key: str | None = None) -> Tables:
        """`spec`'s tables; `key`, when the caller holds it, is `shape_key(spec)`."""
        key = shape_key(spec) if key is None else key
        tables = self._by_key.get(key)
        if tables is not None:
            self._by_key.move_to_end(key)
            return tables
        tables = build_tables(spec, key)
        if len(self._by_key) >= self.size:
            self._by_key.popitem(last=False)
        self._by_key[key] = tables
        return tables


def _pci_rank(
    spec: NumatopologySpec, mig_parent: dict[int, int], position: dict[str, int]
) -> dict[tuple[int, int], int]:
    """PCIe path rank per (device, NIC position); a MIG device sits where its GPU does."""
    rank = {(p.gpu, position[p.nic]): p.path.rank for p in spec.pci_paths}
    for device, parent in mig_parent.items():
        for nic in range(len(position)):
            if (parent, nic) in rank:
                rank[(device, nic)] = rank[(parent, nic)]
    return rank


def _cpu_places(
    spec: NumatopologySpec, online_by_numa: dict[int, frozenset[int]]
) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Per online CPU (the NUMA nodes' cpulists say which): its NUMA node, core and socket from
    spec.cpus, else its own core on socket = NUMA id."""
    cpu_numa: dict[int, int] = {}
    cpu_core: dict[int, int] = {}
    cpu_socket: dict[int, int] = {}
    for cpu in spec.cpus:
        if cpu.online and cpu.numa is not None:
            cpu_numa[cpu.id], cpu_core[cpu.id], cpu_socket[cpu.id] = cpu.numa, cpu.core, cpu.socket
    for numa_id, cpus in online_by_numa.items():
        for cpu_id in cpus:
            cpu_numa.setdefault(cpu_id, numa_id)
            cpu_core.setdefault(cpu_id, cpu_id)
            cpu_socket.setdefault(cpu_id, numa_id)
    return cpu_numa, cpu_core, cpu_socket


def build_tables(spec: NumatopologySpec, key: str | None = None) -> Tables:
    numa_ids = tuple(sorted(n.id for n in spec.numa_nodes))
    known = set(numa_ids)
    online_by_numa = {n.id: n.cpus.ids for n in spec.numa_nodes}
    cpu_numa, cpu_core, cpu_socket = _cpu_places(spec, online_by_numa)
    online = spec.online_cpus().ids
    allocatable = online - spec.reserved_cpus.ids
    core_threads_sets: dict[int, list[int]] = {}
    for cpu_id in sorted(allocatable):
        core_threads_sets.setdefault(cpu_core[cpu_id], []).append(cpu_id)
    all_threads = Counter(cpu_core[cpu_id] for cpu_id in online)
    numa_allocatable = {
        n: frozenset(c for c in online_by_numa[n] if c in allocatable) for n in numa_ids
    }
    socket_allocatable: dict[int, set[int]] = {}
    for cpu_id in allocatable:
        socket_allocatable.setdefault(cpu_socket[cpu_id], set()).add(cpu_id)
    # Memory-only NUMA nodes (CXL expanders, Grace GPU HBM, HBM flat mode) serve pod memory only on
    # a machine with no CPU-bearing node.
    memory_numa_ids = tuple(n for n in numa_ids if numa_allocatable[n]) or numa_ids
    numa_hugepages = {
        (node.id, size): pages * parse_bytes(size)
        for node in spec.numa_nodes
        for size, pages in node.hugepages.items()
    }
    devices = schedulable_devices(spec)
    mig_parent = {d.index: d.parent for d in devices if d.parent is not None}
    # MIG turns NVLink peer-to-peer off: a GPU in MIG mode has no link partner.
    in_mig_mode = {g.index for g in spec.gpus if g.mig_mode}
    gpu_bandwidth: dict[tuple[int, int], float] = {}
    for link in spec.gpu_links:
        if link.a not in in_mig_mode and link.b not in in_mig_mode:
            bandwidth = link.bandwidth_g_bps or float(link.links)
            gpu_bandwidth[(link.a, link.b)] = gpu_bandwidth[(link.b, link.a)] = bandwidth
    distances = {
        (node.id, int(other)): distance or LOCAL_DISTANCE
        for node in spec.numa_nodes
        for other, distance in node.distances.items()
    }
    nic_names = sorted({n.name for n in spec.nics})
    position = {name: i for i, name in enumerate(nic_names)}
    nics = sorted(spec.nics, key=lambda n: position[n.name])
    return Tables(
        key=shape_key(spec) if key is None else key,
        numa_ids=numa_ids,
        cpu_numa=cpu_numa,
        cpu_core=cpu_core,
        core_threads={core: tuple(threads) for core, threads in core_threads_sets.items()},
        whole_cores=frozenset(
            core for core, threads in core_threads_sets.items() if len(threads) == all_threads[core]
        ),
        numa_allocatable=numa_allocatable,
        socket_allocatable={s: frozenset(c) for s, c in socket_allocatable.items()},
        threads_per_core=max(all_threads.values(), default=1),
        memory_numa_ids=memory_numa_ids,
        memory_capacity={n.id: n.memory_bytes for n in spec.numa_nodes if n.id in memory_numa_ids},
        cpu_capacity={n: len(c) for n, c in numa_allocatable.items() if c},
        numa_hugepages=numa_hugepages,
        gpu_numa={d.index: d.numa if d.numa in known else None for d in devices},
        gpu_resource={d.index: d.resource for d in devices},
        gpu_bandwidth=gpu_bandwidth,
        mig_parent=mig_parent,
        nic_numa={position[n.name]: n.numa if n.numa in known else None for n in nics},
        nic_resource={position[n.name]: n.resource for n in nics},
        pci_rank=_pci_rank(spec, mig_parent, position),
        distances=distances,
        numa_online={n: len(c) for n, c in online_by_numa.items()},
    )
