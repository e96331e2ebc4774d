"""Hint providers: per resource, which NUMA masks can satisfy a request, and which are preferred.

A `Resource` is one hint provider's view of one request: CPUs, memory, huge pages of
one size, GPUs or NICs. For a NUMA mask it answers, like the kubelet's providers:

* `satisfiable(mask)`: the mask holds enough of it *from what is free now*;
* a mask is a *preferred* hint when its width equals `min_width`, the fewest NUMA nodes
  that could hold the request on the node's hardware, ignoring every allocation
  (allocatable capacity: reserved CPUs never count).

Devices whose NUMA node is unknown (`numa: null`) are not NUMA-local: they count
towards every mask (`floating_*`). CPUs in `cpu: numa` mode run on the shared pool, so
that provider has no preference of its own (`narrow=False`): any mask whose shared pool
is large enough is as good as any other, as a kubelet provider returning no hint.

`preferred_cover(mask)` is what merging needs: the union of this resource's preferred
hints that fit inside `mask`. The kubelet merges the cross product of every provider's
hints by AND-ing masks; a merged hint is preferred when each chosen hint is. The pod
then really spans the union of those hints, so the engine searches that union
directly: `mask` is a preferred placement iff every resource has a preferred hint
inside it and those hints share a NUMA node (the AND is not empty), i.e. iff the AND
of every resource's `preferred_cover(mask)` is not empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import TypeVar

from numatopo_engine.annotations import CpuMode
from numatopo_engine.numamask import make_mask
from numatopo_engine.state import NodeState
from numatopo_engine.topology_tables import Tables

__all__ = ["FreeView", "Hint", "Need", "Resource", "build_resources"]

DeviceT = TypeVar("DeviceT", int, str)


@dataclass(frozen=True, slots=True)
class Hint:
    """A kubelet TopologyHint: a NUMA mask and whether it is as narrow as the hardware allows."""

    mask: int
    preferred: bool


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


@dataclass(slots=True)
class FreeView:
    """What is free on a node, in plain sets and dicts; a working copy the engine may change."""

    cpus: set[int]  # allocatable CPUs held exclusively by no one (the SHARED pool)
    gpus: set[int]
    nics: set[str]
    memory: dict[int, int]
    hugepages: dict[tuple[int, str], int]

    @classmethod
    def from_state(cls, tables: Tables, state: NodeState, *, hugepages: bool = True) -> FreeView:
        """Read `state`; huge pages only when asked (most requests have none)."""
        signature = state.free_signature()
        free_memory = dict(signature.memory)
        return cls(
            cpus=set(state.free_cpu_ids()),
            gpus=set(state.free_gpus()),
            nics=set(signature.nics),
            memory={n: free_memory[n] for n in tables.memory_numa_ids},
            hugepages={
                (n, size): amount
                for n, size, amount in signature.hugepages
                if hugepages and tables.numa_hugepages.get((n, size))
            },
        )

    def copy(self) -> FreeView:
        return FreeView(
            cpus=set(self.cpus),
            gpus=set(self.gpus),
            nics=set(self.nics),
            memory=dict(self.memory),
            hugepages=dict(self.hugepages),
        )


@dataclass(frozen=True, slots=True)
class Resource:
    """One hint provider for one request."""

    name: str  # "CPUs", "memory", "hugepages-2Mi", "GPUs", "NICs": used in messages
    need: int
    free: Mapping[int, int]  # per NUMA id, only nodes that have any capacity
    floating_free: int
    capacity: Mapping[int, int]
    floating_capacity: int
    narrow: bool = True
    # Fewest NUMA nodes whose hardware could hold the request; None if none could.
    min_width: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "min_width", _narrowest(self))

    def free_in(self, numa_ids: Iterable[int]) -> int:
        return self.floating_free + sum(self.free.get(n, 0) for n in numa_ids)

    def satisfiable(self, numa_ids: Iterable[int]) -> bool:
        return self.free_in(numa_ids) >= self.need

    def hint(self, numa_ids: list[int]) -> Hint | None:
        """The hint this provider gives for a mask, or None when the mask cannot hold it."""
        if not self.satisfiable(numa_ids):
            return None
        preferred = not self.narrow or len(numa_ids) == self.min_width
        return Hint(make_mask(numa_ids), preferred)

    def preferred_cover(self, numa_ids: list[int], min_width: int) -> int:
        """Union of the preferred hints inside `numa_ids` (0 when there is none)."""
        if not self.narrow or min_width >= len(numa_ids):
            return make_mask(numa_ids) if self.satisfiable(numa_ids) else 0
        cover = 0
        if min_width == 1:
            for numa_id in numa_ids:
                if self.floating_free + self.free.get(numa_id, 0) >= self.need:
                    cover |= 1 << numa_id
            return cover
        for combo in combinations(numa_ids, min_width):
            if self.satisfiable(combo):
                cover |= make_mask(combo)
        return cover


def build_resources(tables: Tables, free: FreeView, need: Need) -> list[Resource]:
    """The hint providers that have something to place for `need`."""
    resources: list[Resource] = []
    if need.cpus and need.cpu_mode is not CpuMode.NONE:
        resources.append(_cpu_resource(tables, free, need))
    if need.memory_bytes:
        resources.append(
            Resource(
                name="memory",
                need=need.memory_bytes,
                free={n: max(free.memory.get(n, 0), 0) for n in tables.memory_numa_ids},
                floating_free=0,
                capacity=tables.memory_capacity,
                floating_capacity=0,
            )
        )
    for size, amount in need.hugepages:
        if amount:
            ids = [n for n in tables.numa_ids if tables.numa_hugepages.get((n, size), 0)]
            resources.append(
                Resource(
                    name=f"hugepages-{size}",
                    need=amount,
                    free={n: max(free.hugepages.get((n, size), 0), 0) for n in ids},
                    floating_free=0,
                    capacity={n: tables.numa_hugepages[(n, size)] for n in ids},
                    floating_capacity=0,
                )
            )
    if need.gpus:
        gpus = [g for g in tables.gpu_numa if _matches(tables.gpu_resource[g], need.gpu_resource)]
        resources.append(_device_resource("GPUs", need.gpus, gpus, tables.gpu_numa, free.gpus))
    if need.nics:
        nics = [n for n in tables.nic_numa if _matches(tables.nic_resource[n], need.nic_resource)]
        resources.append(_device_resource("NICs", need.nics, nics, tables.nic_numa, free.nics))
    return resources


def _narrowest(resource: Resource) -> int | None:
    if resource.floating_capacity >= resource.need:
        return 1
    total = resource.floating_capacity
    for count, amount in enumerate(sorted(resource.capacity.values(), reverse=True), start=1):
        total += amount
        if total >= resource.need:
            return count
    return None


def _matches(resource: str, wanted: str | None) -> bool:
    return wanted is None or resource == wanted


def _device_resource(
    name: str,
    need: int,
    devices: list[DeviceT],
    numa_of: Mapping[DeviceT, int | None],
    free_devices: set[DeviceT],
) -> Resource:
    capacity: dict[int, int] = {}
    free: dict[int, int] = {}
    floating_capacity = floating_free = 0
    for device in devices:
        numa_id = numa_of[device]
        is_free = device in free_devices
        if numa_id is None:
            floating_capacity += 1
            floating_free += is_free
        else:
            capacity[numa_id] = capacity.get(numa_id, 0) + 1
            free[numa_id] = free.get(numa_id, 0) + is_free
    return Resource(name, need, free, floating_free, capacity, floating_capacity)


def _cpu_resource(tables: Tables, free: FreeView, need: Need) -> Resource:
    capacity: Mapping[int, int] = {}
    free_count: dict[int, int] = {}
    if need.full_cores and need.cpu_mode is CpuMode.EXCLUSIVE:
        # Only cores with every thread allocatable and free count, a whole core at a time.
        tpc = tables.threads_per_core
        whole: dict[int, int] = {}
        capacity = whole
        for threads in tables.core_threads.values():
            if len(threads) != tpc:
                continue
            numa_id = tables.cpu_numa[threads[0]]
            whole[numa_id] = whole.get(numa_id, 0) + tpc
            if all(t in free.cpus for t in threads):
                free_count[numa_id] = free_count.get(numa_id, 0) + tpc
    else:
        capacity = tables.cpu_capacity
        for numa_id in capacity:
            free_count[numa_id] = len(free.cpus & tables.numa_allocatable[numa_id])
    return Resource(
        name="CPUs",
        need=need.cpus,
        free={n: free_count.get(n, 0) for n in capacity},
        floating_free=0,
        capacity=capacity,
        floating_capacity=0,
        narrow=need.cpu_mode is CpuMode.EXCLUSIVE,
    )
