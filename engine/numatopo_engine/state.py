"""`NodeState`: what is taken on one node, derived only from pod assignments.

The pools, as the kubelet's static CPU policy names them:
  RESERVED    spec.reservedCPUs, never handed out
  EXCLUSIVE   CPUs held by containers with `exclusive: true`
  SHARED      online - RESERVED - EXCLUSIVE: where everything else runs
A container with `exclusive: false` (cpu mode `numa`) runs on SHARED CPUs and books none.

The kubelet's pool of non-exclusive CPUs (its "default cpuset") is RESERVED + SHARED, and it never
hands out the last CPU of it: a node whose reserved CPUs are all offline or absent must keep one
allocatable CPU unassigned (`shared_floor`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Container, Iterable, Mapping
from typing import NamedTuple, Protocol, TypeVar

from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.devices import schedulable_devices
from numatopo_engine.errors import OverlapError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.numamask import make_mask
from numatopo_engine.quantity import page_bytes, parse_bytes
from numatopo_engine.topology_tables import NodeNames, Tables, node_names, shape_key


class FreeSignature(NamedTuple):
    """Everything free on a node: equal signatures on one topology, equal `free_*` answers. A tuple,
    so memos hash it in C."""

    cpu_mask: int  # bit c set: CPU c is allocatable and held exclusively by no one
    gpu_mask: int  # bit i set: device index i (whole GPU or MIG device) is free
    nics: frozenset[str]  # free NIC names
    memory: tuple[tuple[int, int], ...]  # (NUMA id, free bytes), every NUMA node, by id
    hugepages: tuple[tuple[int, str, int], ...]  # (NUMA id, size, free bytes) with capacity


def join_group(groups: dict[int, int], numa_ids: Iterable[int]) -> None:
    """Record in `groups` (NUMA id -> group mask, -1 on a conflict) that memory was placed over
    `numa_ids` together, as the kubelet's memory manager records Cells."""
    ids = list(numa_ids)
    group = make_mask(ids)
    for numa_id in ids:
        held = groups.get(numa_id, 0)
        groups[numa_id] = group if held in (0, group) else -1


def shared_floor(topology: NumatopologySpec) -> int:
    """How many allocatable CPUs no exclusive assignment may take on this node (module docstring): 0
    with an online reserved CPU, else 1."""
    return 0 if topology.reserved_cpus.ids & topology.online_cpus().ids else 1


class NodeState:
    """One node's allocations by pod (`namespace/name`), with its `shape_key` and `names`."""

    # The two attributes the extender reads of ~500 states a cycle are slots (read without a dict
    # look-up); the rest live in the instance dict.
    __slots__ = ("__dict__", "row_cache", "version")

    def __init__(
        self,
        topology: NumatopologySpec,
        *,
        unhealthy_gpus: Iterable[int] = (),
        unhealthy_nics: Iterable[str] = (),
        tables: Tables | None = None,
        names: NodeNames | None = None,
    ) -> None:
        """`unhealthy_*`: devices the kubelet cannot hand out now (`status.unhealthy`): never free,
        yet a pod holding one keeps it. `tables`, `names`: the caller's, saving their building."""
        self.topology = topology
        self.assignments: dict[str, Assignment] = {}
        self._cpu_owner: dict[int, str] = {}
        self._gpu_owner: dict[int, str] = {}
        self._nic_owner: dict[str, str] = {}
        self._memory: dict[int, int] = {}
        self._hugepages: dict[tuple[int, str], int] = {}
        self._online = topology.online_cpus()
        devices = schedulable_devices(topology)
        # Whole GPUs and MIG devices share one index space and one owner table.
        self._whole_gpu_ids = frozenset(d.index for d in devices if d.parent is None)
        self._mig_ids = frozenset(d.index for d in devices if d.parent is not None)
        self._in_mig_mode = frozenset(g.index for g in topology.gpus if g.mig_mode)
        self._gpu_ids = self._whole_gpu_ids | self._mig_ids
        self._nic_ids = frozenset(n.name for n in topology.nics)
        self.unhealthy_gpus = frozenset(unhealthy_gpus) & self._gpu_ids
        self.unhealthy_nics = frozenset(unhealthy_nics) & self._nic_ids
        # O(1) counters for count-level filters, and `version`, bumped by every booking and release
        # (equal versions, equal answers) for caches of what is free; a plain attribute: the
        # extender reads it for ~500 nodes a cycle.
        self.version = 0
        self._allocatable_count = len(self._allocatable())
        self.shared_floor = shared_floor(topology)
        self._memory_capacity = sum(n.memory_bytes for n in topology.numa_nodes)
        self._memory_booked = 0
        self._summary: tuple[int, frozenset[int], FreeSignature] | None = None
        self._groups: tuple[int, dict[int, int]] | None = None
        # The decision's row of this state (`hints.row_of`) and its layout; dropped by every change.
        self.row_cache: tuple[object, bytes] | None = None
        # The shape's tables as the caller built them (an engine uses them as its own).
        self.tables = tables
        if tables is not None:
            self.shape_key = tables.key
        if names is not None:
            self.names = names

    @classmethod
    def rebuild(
        cls, topology: NumatopologySpec, assignments: Iterable[tuple[str, Assignment]]
    ) -> tuple[NodeState, list[OverlapError]]:
        """Apply assignments in the given order; ones that conflict are skipped and returned."""
        state = cls(topology)
        rejected: list[OverlapError] = []
        for key, assignment in assignments:
            try:
                state.apply(key, assignment)
            except OverlapError as exc:
                rejected.append(exc)
        return state, rejected

    def copy(self) -> NodeState:
        other = NodeState.__new__(NodeState)
        other.__dict__.update(self.__dict__)
        other.version, other.row_cache = self.version, self.row_cache
        other.assignments = dict(self.assignments)
        other._cpu_owner = dict(self._cpu_owner)
        other._gpu_owner = dict(self._gpu_owner)
        other._nic_owner = dict(self._nic_owner)
        other._memory = dict(self._memory)
        other._hugepages = dict(self._hugepages)
        return other

    # -- queries ---------------------------------------------------------------

    def free_cpus(self) -> CPUSet:
        """SHARED minus nothing: online CPUs that are neither reserved nor exclusive."""
        return self._online - self.topology.reserved_cpus - CPUSet(self._cpu_owner)

    def free_gpus(self) -> frozenset[int]:
        return self._gpu_ids - self._gpu_owner.keys() - self.unhealthy_gpus

    def free_nics(self) -> frozenset[str]:
        # `frozenset - dict.keys()` is a (mutable, unhashable) set: signatures hash this.
        return self._nic_ids.difference(self._nic_owner, self.unhealthy_nics)

    def free_memory(self, numa: int) -> int:
        return self.topology.numa_node(numa).memory_bytes - self._memory.get(numa, 0)

    def free_hugepages(self, numa: int, size: str) -> int:
        """Free bytes of huge pages of `size` ("2Mi") on `numa`."""
        pages = self.topology.numa_node(numa).hugepages.get(size, 0)
        return pages * parse_bytes(size) - self._hugepages.get((numa, size), 0)

    @functools.cached_property
    def shape_key(self) -> str:
        """`topology_tables.shape_key` of this node's topology."""
        return shape_key(self.topology)

    @functools.cached_property
    def names(self) -> NodeNames:
        """What this node's assignments call its GPUs and NICs."""
        return node_names(self.topology)

    def _allocatable(self) -> frozenset[int]:
        """Online CPUs not reserved: built when asked, not held (a second CPU set per node
        would cost ~8 KiB on each of a fleet's thousands of nodes)."""
        return self._online.ids - self.topology.reserved_cpus.ids

    def free_cpu_count(self) -> int:
        """`len(free_cpus())` in O(1)."""
        return self._allocatable_count - len(self._cpu_owner)

    def free_gpu_count(self) -> int:
        """`len(free_gpus())`, in O(1) while every device is healthy."""
        if self.unhealthy_gpus:
            return len(self.free_gpus())
        return len(self._gpu_ids) - len(self._gpu_owner)

    def free_memory_total(self) -> int:
        """The sum of `free_memory` over every NUMA node, in O(1)."""
        return self._memory_capacity - self._memory_booked

    def free_cpu_ids(self) -> frozenset[int]:
        """The ids of `free_cpus()` without building a CPUSet; cached until the next change."""
        return self._summarise()[1]

    def free_signature(self) -> FreeSignature:
        """What is free, as one hashable value; cached until the next change."""
        return self._summarise()[2]

    def memory_groups(self) -> dict[int, int]:
        """Per NUMA id holding pod memory, its group: its containers' `mems` mask, -1 where two
        disagree; cached until the next change."""
        cached = self._groups
        if cached is not None and cached[0] == self.version:
            return cached[1]
        groups: dict[int, int] = {}
        for assignment in self.assignments.values():
            for container in assignment.containers.values():
                held = any(container.memory.values()) or any(
                    any(sizes.values()) for sizes in container.hugepages.values()
                )
                if held:
                    join_group(groups, container.mems.ids)
        self._groups = (self.version, groups)
        return groups

    def _summarise(self) -> tuple[int, frozenset[int], FreeSignature]:
        summary = self._summary
        if summary is not None and summary[0] == self.version:
            return summary
        cpus = self._allocatable() - self._cpu_owner.keys()
        cpu_mask = sum(1 << cpu for cpu in cpus)
        gpu_mask = sum(1 << gpu for gpu in self.free_gpus())
        nodes = sorted(self.topology.numa_nodes, key=lambda n: n.id)
        signature = FreeSignature(
            cpu_mask=cpu_mask,
            gpu_mask=gpu_mask,
            nics=self.free_nics(),
            memory=tuple((n.id, self.free_memory(n.id)) for n in nodes),
            hugepages=tuple(
                (n.id, size, self.free_hugepages(n.id, size))
                for n in nodes
                for size, pages in sorted(n.hugepages.items())
                if pages
            ),
        )
        self._summary = summary = (self.version, frozenset(cpus), signature)
        return summary

    # -- changes ---------------------------------------------------------------

    def apply(self, key: str, assignment: Assignment) -> None:
        """Book `assignment` for pod `key`; all or nothing. Re-applying the same pod replaces it."""
        previous = self.assignments.get(key)
        if previous is not None:
            self.release(key)
        try:
            self._check(key, assignment)
        except OverlapError:
            if previous is not None:
                self._book(key, previous)
            raise
        self._book(key, assignment)

    def release(self, key: str) -> Assignment | None:
        """Free everything pod `key` holds; returns what it held (None if nothing)."""
        assignment = self.assignments.pop(key, None)
        if assignment is None:
            return None
        self.version += 1
        self.row_cache = None
        self._cpu_owner = {c: owner for c, owner in self._cpu_owner.items() if owner != key}
        self._gpu_owner = {g: owner for g, owner in self._gpu_owner.items() if owner != key}
        self._nic_owner = {n: owner for n, owner in self._nic_owner.items() if owner != key}
        for container in assignment.containers.values():
            self._count_memory(container, -1)
        return assignment

    def _check(self, key: str, assignment: Assignment) -> None:
        problems: list[str] = []
        cpus_seen: set[int] = set()
        gpus_seen: set[int] = set()
        nics_seen: set[str] = set()
        # (NUMA id, None for memory or the huge page size) -> bytes booked
        memory: dict[tuple[int, str | None], int] = {}
        hugepages: dict[tuple[int, str | None], int] = {}
        numa_ids = {n.id for n in self.topology.numa_nodes}
        for cname, container in sorted(assignment.containers.items()):
            where = f"container {cname}: "
            if container.exclusive:
                problems += _device_problems(
                    where + "CPU",
                    container.cpus,
                    self._cpu_owner,
                    cpus_seen,
                    (self._online, "is not online"),
                    (self._allocatable(), "is reserved"),
                )
            split = [g for g in container.gpu_indices if g in self._in_mig_mode]
            problems += [
                f"{where}GPU {g} is in MIG mode (only its MIG devices are handed out)"
                for g in split
            ]
            whole = [g for g in container.gpu_indices if g not in self._in_mig_mode]
            problems += _device_problems(
                where + "GPU", whole, self._gpu_owner, gpus_seen, (self._whole_gpu_ids, _ABSENT)
            )
            problems += _device_problems(
                where + "MIG device",
                container.mig_indices,
                self._gpu_owner,
                gpus_seen,
                (self._mig_ids, _ABSENT),
            )
            problems += _device_problems(
                where + "NIC", container.nics, self._nic_owner, nics_seen, (self._nic_ids, _ABSENT)
            )
            for numa_text, amount in container.memory.items():
                if amount < 0:
                    # A negative booking would hand memory back to everyone else.
                    problems.append(f"container {cname}: memory {amount} bytes is negative")
                slot: tuple[int, str | None] = (int(numa_text), None)
                memory[slot] = memory.get(slot, 0) + amount
            for numa_text, sizes in container.hugepages.items():
                for size, amount in sizes.items():
                    if amount < 0:
                        problems.append(f"container {cname}: hugepages {amount} bytes is negative")
                    slot = (int(numa_text), size)
                    hugepages[slot] = hugepages.get(slot, 0) + amount
        for (numa, page), amount in [*sorted(memory.items()), *sorted(hugepages.items())]:
            name = "memory" if page is None else f"hugepages-{page}"
            if numa not in numa_ids:
                problems.append(f"{name} booked on unknown NUMA node {numa}")
            elif page is not None and not page_bytes(page):
                problems.append(f"hugepages-{page[:16]}: not a page size (expected e.g. 2Mi, 1Gi)")
            else:
                free = self.free_memory(numa) if page is None else self.free_hugepages(numa, page)
                if amount > free:
                    problems.append(f"{name} on NUMA {numa}: {amount} bytes booked, {free} free")
        if problems:
            raise OverlapError(f"assignment of {key} rejected: " + "; ".join(problems))

    def _book(self, key: str, assignment: Assignment) -> None:
        self.assignments[key] = assignment
        self.version += 1
        self.row_cache = None
        for container in assignment.containers.values():
            if container.exclusive:
                for cpu in container.cpus:
                    self._cpu_owner[cpu] = key
            for gpu in (*container.gpu_indices, *container.mig_indices):
                self._gpu_owner[gpu] = key
            for nic in container.nics:
                self._nic_owner[nic] = key
            self._count_memory(container, 1)

    def _count_memory(self, container: ContainerAssignment, sign: int) -> None:
        """Book (`sign` 1) or release (-1) a container's memory and huge pages."""
        for numa, amount in container.memory.items():
            self._memory[int(numa)] = self._memory.get(int(numa), 0) + sign * amount
            self._memory_booked += sign * amount
        for numa, sizes in container.hugepages.items():
            for size, amount in sizes.items():
                slot = (int(numa), size)
                self._hugepages[slot] = self._hugepages.get(slot, 0) + sign * amount


K = TypeVar("K", int, str)  # a CPU id, a GPU index or a NIC name
_ABSENT = "does not exist"


def _device_problems(
    what: str,
    asked: Iterable[K],
    owners: Mapping[K, str],
    seen: set[K],
    *pools: tuple[Container[K], str],
) -> list[str]:
    """Why CPUs or devices of one kind cannot go to a container: outside one of `pools` (the
    first such pool's words), held, or given twice."""
    problems: list[str] = []
    for device in asked:
        owner = owners.get(device)
        outside = next((why for pool, why in pools if device not in pool), None)
        if outside is not None:
            problems.append(f"{what} {device} {outside}")
        elif owner is not None:
            problems.append(f"{what} {device} is held by {owner}")
        elif device in seen:
            problems.append(f"{what} {device} is given twice")
        seen.add(device)
    return problems


class Claim(Protocol):
    """A pod's assignment, as read from the pod, that may overlap another pod's."""

    @property
    def key(self) -> str: ...  # `namespace/name`, as `NodeState` keys pods
    @property
    def uid(self) -> str: ...  # '' when unknown
    @property
    def assignment(self) -> Assignment: ...


C = TypeVar("C", bound=Claim)


def claim_order(claim: Claim) -> tuple[int, str, str]:
    """Which of several pods claiming the same CPU or GPU keeps it: the earlier decision
    (`Assignment.seq`, 0 before sequences existed), then the lower pod uid, then the key. Not
    creation time: a pod created earlier but assigned later would take CPUs from one running on
    them. The ledger and the node agent both order by this, so they book the same pod."""
    return claim.assignment.seq, claim.uid, claim.key


def book_in_claim_order(
    state: NodeState,
    claims: Iterable[C],
    *,
    booked: Callable[[C], Assignment] = lambda claim: claim.assignment,
    stale: Container[str] = (),
) -> tuple[list[C], list[tuple[C, str]]]:
    """Apply `booked(claim)` of each of `claims` to `state` in `claim_order`, the pods in `stale`
    last (a decision older than one the pod showed before, whose resources may be another's since).
    Returns the claims booked and the overlapping ones (booking nothing) with the `OverlapError`
    text, both in claim order."""
    kept: list[C] = []
    overlapping: list[tuple[C, str]] = []
    for claim in sorted(claims, key=lambda claim: (claim.key in stale, claim_order(claim))):
        try:
            state.apply(claim.key, booked(claim))
        except OverlapError as exc:
            overlapping.append((claim, str(exc)))
        else:
            kept.append(claim)
    return kept, overlapping


def cached_rows(states: Iterable[NodeState], layout: object) -> list[bytes | None]:
    """Each state's decision row under `layout` as kept on it (`row_cache`), else None."""
    return [c[1] if (c := s.row_cache) is not None and c[0] is layout else None for s in states]
