"""Per-topology lookup tables the allocation hot path reads instead of the pydantic spec.

A scheduler extender evaluates one pod against thousands of nodes that mostly share a
handful of hardware shapes, so a caller's `TableCache` builds them once per distinct
spec content and shares them by every spec object with that content (found by
`id(spec)` while the spec lives). Tables hold hardware facts only, never memos.

Pools, in the kubelet's words: *allocatable* CPUs are online and not reserved; only
they are ever handed out or counted as capacity.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from numatopo_engine.devices import schedulable_devices
from numatopo_engine.model import NumatopologySpec, PathType
from numatopo_engine.numamask import LOCAL_DISTANCE
from numatopo_engine.quantity import parse_bytes

__all__ = ["TableCache", "Tables", "build_tables"]
# Rank used for a GPU-NIC pair with no known PCIe path: farther than SYS.
NO_PATH_RANK = len(PathType)


@dataclass(frozen=True, slots=True)
class Tables:
    numa_ids: tuple[int, ...]
    cpu_numa: dict[int, int]
    cpu_core: dict[int, int]
    cpu_socket: dict[int, int]
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
    gpu_name: dict[int, str]  # uuid, else PCI bus id, else GPU-<index>
    gpu_bandwidth: dict[tuple[int, int], float]  # both orders; never a GPU in MIG mode
    mig_parent: dict[int, int]  # MIG device index -> its GPU's index
    nic_numa: dict[str, int | None]
    nic_resource: dict[str, str]
    pci_rank: dict[tuple[int, str], int]
    distances: dict[tuple[int, int], int]
    numa_online: dict[int, int] = field(default_factory=dict)  # online CPUs, reserved too


class TableCache:
    """Tables per spec, owned by the caller (an `Engine`): one build per hardware shape.

    Per spec object (the operator's ledger holds one per node, parsed from its own CRD)
    a weak reference, so an entry lives exactly as long as its spec; per distinct
    content, shared by every node of one hardware shape.
    """

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._by_spec: dict[int, tuple[weakref.ref[NumatopologySpec], Tables]] = {}
        self._by_content: dict[str, Tables] = {}

    def get(self, spec: NumatopologySpec) -> Tables:
        hit = self._by_spec.get(id(spec))
        if hit is not None and hit[0]() is spec:
            return hit[1]
        content = spec.model_dump_json()
        tables = self._by_content.get(content)
        if tables is None:
            tables = build_tables(spec)
            if len(self._by_content) >= self._size:
                del self._by_content[next(iter(self._by_content))]
            self._by_content[content] = tables
        key = id(spec)
        by_spec = self._by_spec
        by_spec[key] = (weakref.ref(spec, lambda ref: _forget(by_spec, key, ref)), tables)
        return tables


def _forget(
    by_spec: dict[int, tuple[weakref.ref[NumatopologySpec], Tables]],
    key: int,
    ref: weakref.ref[NumatopologySpec],
) -> None:
    entry = by_spec.get(key)
    if entry is not None and entry[0] is ref:
        del by_spec[key]


def _pci_rank(spec: NumatopologySpec, mig_parent: dict[int, int]) -> dict[tuple[int, str], int]:
    """PCIe path rank per (device, NIC); a MIG device sits where its GPU does."""
    rank = {(p.gpu, p.nic): p.path.rank for p in spec.pci_paths}
    for device, parent in mig_parent.items():
        for nic in spec.nics:
            if (parent, nic.name) in rank:
                rank[(device, nic.name)] = rank[(parent, nic.name)]
    return rank


def build_tables(spec: NumatopologySpec) -> Tables:
    numa_ids = tuple(sorted(n.id for n in spec.numa_nodes))
    known = set(numa_ids)
    reserved = spec.reserved_cpus.ids
    online_by_numa = {n.id: n.cpus.ids for n in spec.numa_nodes}
    cpu_numa: dict[int, int] = {}
    cpu_core: dict[int, int] = {}
    cpu_socket: dict[int, int] = {}
    for cpu in spec.cpus:
        if cpu.online and cpu.numa is not None:
            cpu_numa[cpu.id], cpu_core[cpu.id], cpu_socket[cpu.id] = cpu.numa, cpu.core, cpu.socket
    # A NUMA node's cpulist is authoritative for what is online; rows in spec.cpus add
    # core/socket detail. CPUs without a row are their own core on socket = NUMA id.
    for numa_id, cpus in online_by_numa.items():
        for cpu_id in cpus:
            cpu_numa.setdefault(cpu_id, numa_id)
            cpu_core.setdefault(cpu_id, cpu_id)
            cpu_socket.setdefault(cpu_id, numa_id)
    online = frozenset().union(*online_by_numa.values()) if online_by_numa else frozenset()
    allocatable = {c for c in online if c not in reserved}
    core_threads_sets: dict[int, list[int]] = {}
    for cpu_id in sorted(allocatable):
        core_threads_sets.setdefault(cpu_core[cpu_id], []).append(cpu_id)
    all_threads: dict[int, int] = {}
    for cpu_id in online:
        all_threads[cpu_core[cpu_id]] = all_threads.get(cpu_core[cpu_id], 0) + 1
    threads_per_core = max(all_threads.values(), default=1)
    numa_allocatable = {
        n: frozenset(c for c in online_by_numa[n] if c in allocatable) for n in numa_ids
    }
    socket_allocatable: dict[int, set[int]] = {}
    for cpu_id in allocatable:
        socket_allocatable.setdefault(cpu_socket[cpu_id], set()).add(cpu_id)
    cpu_bearing = tuple(n for n in numa_ids if numa_allocatable[n])
    # Memory-only NUMA nodes (CXL expanders, GPU HBM on Grace systems, HBM flat mode)
    # are not where a pod's ordinary memory should be bound; they serve pod memory only
    # on a machine that has no CPU-bearing node at all.
    memory_numa_ids = cpu_bearing or numa_ids
    numa_hugepages: dict[tuple[int, str], int] = {}
    for node in spec.numa_nodes:
        for size, pages in node.hugepages.items():
            numa_hugepages[(node.id, size)] = pages * parse_bytes(size)
    devices = schedulable_devices(spec)
    mig_parent = {d.index: d.parent for d in devices if d.parent is not None}
    # MIG turns NVLink peer-to-peer off: a GPU in MIG mode has no link partner.
    in_mig_mode = {g.index for g in spec.gpus if g.mig_mode}
    gpu_bandwidth: dict[tuple[int, int], float] = {}
    for link in spec.gpu_links:
        if link.a in in_mig_mode or link.b in in_mig_mode:
            continue
        bandwidth = link.bandwidth_g_bps or float(link.links)
        gpu_bandwidth[(link.a, link.b)] = bandwidth
        gpu_bandwidth[(link.b, link.a)] = bandwidth
    distances: dict[tuple[int, int], int] = {}
    for node in spec.numa_nodes:
        for other, distance in node.distances.items():
            distances[(node.id, int(other))] = distance or LOCAL_DISTANCE
    return Tables(
        numa_ids=numa_ids,
        cpu_numa=cpu_numa,
        cpu_core=cpu_core,
        cpu_socket=cpu_socket,
        core_threads={core: tuple(threads) for core, threads in core_threads_sets.items()},
        whole_cores=frozenset(
            core for core, threads in core_threads_sets.items() if len(threads) == all_threads[core]
        ),
        numa_allocatable=numa_allocatable,
        socket_allocatable={s: frozenset(c) for s, c in socket_allocatable.items()},
        threads_per_core=threads_per_core,
        memory_numa_ids=memory_numa_ids,
        memory_capacity={n.id: n.memory_bytes for n in spec.numa_nodes if n.id in memory_numa_ids},
        cpu_capacity={n: len(c) for n, c in numa_allocatable.items() if c},
        numa_hugepages=numa_hugepages,
        gpu_numa={d.index: d.numa if d.numa in known else None for d in devices},
        gpu_resource={d.index: d.resource for d in devices},
        gpu_name={d.index: d.name for d in devices},
        gpu_bandwidth=gpu_bandwidth,
        mig_parent=mig_parent,
        nic_numa={n.name: n.numa if n.numa in known else None for n in spec.nics},
        nic_resource={n.name: n.resource for n in spec.nics},
        pci_rank=_pci_rank(spec, mig_parent),
        distances=distances,
        numa_online={n: len(c) for n, c in online_by_numa.items()},
    )
