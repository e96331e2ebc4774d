"""What a request needs and what a node has free, in the shapes the decision reads.

`Need` is one placement unit's request in engine units; `FreeView` is what is free on a node as
plain sets (the fill step's working copy); a node's *row* is the same as integers (`row_of`), laid
out by `RowLayout` so the rows of a shape's nodes stack into one matrix for the vectorised decision.

Memory groups are the kubelet memory manager's bookkeeping (`machineState[n].Cells`): a NUMA node
holding memory of a container that spans NUMA nodes `G` is in group `G`; one holding single-node
memory is in its own group. The manager never lets a node of one group serve a placement of another
(`memorymanager/policy_static.go`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from numatopo_engine.annotations import CpuMode
from numatopo_engine.cpu_assignment import free_whole_core_cpus
from numatopo_engine.state import NodeState
from numatopo_engine.topology_tables import Tables


@dataclass(frozen=True, slots=True)
class Need:
    """What one placement unit (the pod, or one container) asks for, in engine units."""

    cpus: int = 0  # exclusive CPUs, or shared-pool CPUs (rounded up) in `cpu: numa` mode
    cpu_mode: CpuMode = CpuMode.EXCLUSIVE
    full_cores: bool = False
    memory_bytes: int = 0
    hugepages: tuple[tuple[str, int], ...] = ()  # (size, bytes), sorted by size
    gpus: int = 0
    gpu_resource: str | None = None
    nics: int = 0
    nic_resource: str | None = None

    @property
    def exclusive_cpus(self) -> int:
        return self.cpus if self.cpu_mode is CpuMode.EXCLUSIVE else 0

    @property
    def has_memory(self) -> bool:
        return bool(self.memory_bytes or any(amount for _, amount in self.hugepages))


@dataclass(slots=True)
class FreeView:
    """What is free on a node, in plain sets and dicts; a working copy the engine may change."""

    cpus: set[int]  # allocatable CPUs held exclusively by no one (the shared pool)
    gpus: set[int]
    nics: set[int]  # NIC positions (`topology_tables`): names decide nothing
    memory: dict[str, dict[int, int]]  # kind ("memory" or a huge page size) -> NUMA id -> bytes
    # NUMA id -> group mask, -1: two groups (`state.join_group`)
    groups: dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_state(cls, tables: Tables, state: NodeState) -> FreeView:
        signature = state.free_signature()
        free_memory = dict(signature.memory)
        position = state.names.nic_position
        memory = {"memory": {n: free_memory[n] for n in tables.memory_numa_ids}}
        for n, size, amount in signature.hugepages:
            if tables.numa_hugepages.get((n, size)):
                memory.setdefault(size, {})[n] = amount
        return cls(
            cpus=set(state.free_cpu_ids()),
            gpus=set(state.free_gpus()),
            nics={position[name] for name in signature.nics},
            memory=memory,
            groups=dict(state.memory_groups()),
        )

    def join_group(self, numa_ids: list[int]) -> None:
        """Record that memory was placed over `numa_ids`: the latest mask wins, as in the memory
        manager's `updateMachineState` (the pod's containers come in the kubelet's order; for booked
        pods, whose order is unknown, `state.join_group` marks a conflict instead)."""
        group = sum(1 << n for n in numa_ids)
        for numa_id in numa_ids:
            self.groups[numa_id] = group


class RowLayout(NamedTuple):
    """Columns of a node's row, for one hardware shape. Per NUMA node (`numa_ids` order): free
    allocatable CPUs, free CPUs of wholly free whole cores, free memory bytes, the memory group (as
    a mask of NUMA *positions*); then free huge page bytes per `hugepages` key; free devices per
    `gpu_keys` / `nic_keys` key (NUMA id or None, resource); the free GPU bitmask (-1 when an index
    is 63 or more); a zero column."""

    numa_ids: tuple[int, ...]
    hugepages: tuple[tuple[int, str], ...]
    gpu_keys: tuple[tuple[int | None, str], ...]
    nic_keys: tuple[tuple[int | None, str], ...]

    @property
    def n(self) -> int:
        return len(self.numa_ids)

    def cpu(self, position: int) -> int:
        return position

    def whole(self, position: int) -> int:
        return self.n + position

    def memory(self, position: int) -> int:
        return 2 * self.n + position

    def group(self, position: int) -> int:
        return 3 * self.n + position

    def hugepage(self, index: int) -> int:
        return 4 * self.n + index

    def gpu(self, index: int) -> int:
        return 4 * self.n + len(self.hugepages) + index

    def nic(self, index: int) -> int:
        return self.gpu(len(self.gpu_keys)) + index

    @property
    def gpu_bits(self) -> int:
        return self.nic(len(self.nic_keys))

    @property
    def zero(self) -> int:
        return self.gpu_bits + 1

    @property
    def width(self) -> int:
        return self.zero + 1


def row_layout(tables: Tables) -> RowLayout:
    return RowLayout(
        numa_ids=tables.numa_ids,
        hugepages=tuple(sorted(k for k, v in tables.numa_hugepages.items() if v)),
        gpu_keys=tuple(sorted({(n, tables.gpu_resource[g]) for g, n in tables.gpu_numa.items()},
                              key=_key_order)),
        nic_keys=tuple(sorted({(n, tables.nic_resource[x]) for x, n in tables.nic_numa.items()},
                              key=_key_order)),
    )  # fmt: skip


def _key_order(key: tuple[int | None, str]) -> tuple[int, str]:
    return (-1 if key[0] is None else key[0], key[1])


def row_of(tables: Tables, layout: RowLayout, free: FreeView) -> list[int]:
    """`free` as the integers `layout` names (see `RowLayout`)."""
    numa_ids = layout.numa_ids
    position = {n: i for i, n in enumerate(numa_ids)}
    whole = Counter(tables.cpu_numa[c] for c in free_whole_core_cpus(tables, free.cpus, numa_ids))
    groups = []
    for n in numa_ids:
        group = free.groups.get(n, 0)
        if group > 0:
            group = sum(1 << position[m] for m in range(group.bit_length()) if group >> m & 1)
        groups.append(group)
    gpu_counts = Counter((tables.gpu_numa[g], tables.gpu_resource[g]) for g in free.gpus)
    nic_counts = Counter((tables.nic_numa[x], tables.nic_resource[x]) for x in free.nics)
    gpu_bits = sum(1 << g for g in free.gpus)
    return [
        *(len(free.cpus & tables.numa_allocatable[n]) for n in numa_ids),
        *(whole[n] for n in numa_ids),
        *(free.memory["memory"].get(n, 0) for n in numa_ids),
        *groups,
        *(free.memory.get(size, {}).get(n, 0) for n, size in layout.hugepages),
        *(gpu_counts[key] for key in layout.gpu_keys),
        *(nic_counts[key] for key in layout.nic_keys),
        gpu_bits if gpu_bits < 1 << 63 else -1,
        0,
    ]
