"""`NodeState`: what is taken on one node, derived only from pod assignments.

The pools, as the kubelet's static CPU policy names them:
  RESERVED    spec.reservedCPUs, never handed out
  EXCLUSIVE   CPUs held by containers with `exclusive: true`
  SHARED      online - RESERVED - EXCLUSIVE: where everything else runs
A container with `exclusive: false` (cpu mode `numa`) runs on SHARED CPUs and books none.
"""

from __future__ import annotations

from collections.abc import Iterable

from numatopo_engine.annotations import Assignment
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.errors import OverlapError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.quantity import QuantityError, parse_bytes

__all__ = ["NodeState"]


class NodeState:
    """Mutable bookkeeping of one node's allocations, keyed by pod (`namespace/name`)."""

    def __init__(self, topology: NumatopologySpec) -> None:
        self.topology = topology
        self.assignments: dict[str, Assignment] = {}
        self._cpu_owner: dict[int, str] = {}
        self._gpu_owner: dict[int, str] = {}
        self._nic_owner: dict[str, str] = {}
        self._memory: dict[int, int] = {}
        self._hugepages: dict[tuple[int, str], int] = {}
        self._online = topology.online_cpus()
        self._gpu_ids = frozenset(g.index for g in topology.gpus)
        self._nic_ids = frozenset(n.name for n in topology.nics)

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
        return self._gpu_ids - self._gpu_owner.keys()

    def free_nics(self) -> frozenset[str]:
        return self._nic_ids - self._nic_owner.keys()

    def free_memory(self, numa: int) -> int:
        return self.topology.numa_node(numa).memory_bytes - self._memory.get(numa, 0)

    def free_hugepages(self, numa: int, size: str) -> int:
        """Free bytes of huge pages of `size` ("2Mi") on `numa`."""
        pages = self.topology.numa_node(numa).hugepages.get(size, 0)
        return pages * parse_bytes(size) - self._hugepages.get((numa, size), 0)

    def owner_of_cpu(self, cpu: int) -> str | None:
        return self._cpu_owner.get(cpu)

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
        for cpu in [c for c, owner in self._cpu_owner.items() if owner == key]:
            del self._cpu_owner[cpu]
        for gpu in [g for g, owner in self._gpu_owner.items() if owner == key]:
            del self._gpu_owner[gpu]
        for nic in [n for n, owner in self._nic_owner.items() if owner == key]:
            del self._nic_owner[nic]
        for container in assignment.containers.values():
            for numa, amount in container.memory.items():
                self._memory[int(numa)] -= amount
            for numa, sizes in container.hugepages.items():
                for size, amount in sizes.items():
                    self._hugepages[(int(numa), size)] -= amount
        return assignment

    def _check(self, key: str, assignment: Assignment) -> None:
        problems: list[str] = []
        cpus_seen: set[int] = set()
        gpus_seen: set[int] = set()
        nics_seen: set[str] = set()
        memory: dict[int, int] = {}
        hugepages: dict[tuple[int, str], int] = {}
        numa_ids = {n.id for n in self.topology.numa_nodes}
        for cname, container in sorted(assignment.containers.items()):
            if container.exclusive:
                for cpu in container.cpus:
                    owner = self._cpu_owner.get(cpu)
                    if cpu not in self._online:
                        problems.append(f"container {cname}: CPU {cpu} is not online")
                    elif cpu in self.topology.reserved_cpus:
                        problems.append(f"container {cname}: CPU {cpu} is reserved")
                    elif owner is not None:
                        problems.append(f"container {cname}: CPU {cpu} is held by {owner}")
                    elif cpu in cpus_seen:
                        problems.append(f"container {cname}: CPU {cpu} is given twice")
                    cpus_seen.add(cpu)
            for gpu in container.gpu_indices:
                owner = self._gpu_owner.get(gpu)
                if gpu not in self._gpu_ids:
                    problems.append(f"container {cname}: GPU {gpu} does not exist")
                elif owner is not None:
                    problems.append(f"container {cname}: GPU {gpu} is held by {owner}")
                elif gpu in gpus_seen:
                    problems.append(f"container {cname}: GPU {gpu} is given twice")
                gpus_seen.add(gpu)
            for nic in container.nics:
                owner = self._nic_owner.get(nic)
                if nic not in self._nic_ids:
                    problems.append(f"container {cname}: NIC {nic} does not exist")
                elif owner is not None:
                    problems.append(f"container {cname}: NIC {nic} is held by {owner}")
                elif nic in nics_seen:
                    problems.append(f"container {cname}: NIC {nic} is given twice")
                nics_seen.add(nic)
            for numa_text, amount in container.memory.items():
                if amount < 0:
                    # A negative booking would hand memory back to everyone else.
                    problems.append(f"container {cname}: memory {amount} bytes is negative")
                memory[int(numa_text)] = memory.get(int(numa_text), 0) + amount
            for numa_text, sizes in container.hugepages.items():
                for size, amount in sizes.items():
                    if amount < 0:
                        problems.append(f"container {cname}: hugepages {amount} bytes is negative")
                    slot = (int(numa_text), size)
                    hugepages[slot] = hugepages.get(slot, 0) + amount
        for numa, amount in sorted(memory.items()):
            if numa not in numa_ids:
                problems.append(f"memory booked on unknown NUMA node {numa}")
            elif amount > self.free_memory(numa):
                problems.append(
                    f"memory on NUMA {numa}: {amount} bytes booked, {self.free_memory(numa)} free"
                )
        for (numa, size), amount in sorted(hugepages.items()):
            if numa not in numa_ids:
                problems.append(f"hugepages-{size} booked on unknown NUMA node {numa}")
            elif not _is_page_size(size):
                problems.append(f"hugepages-{size[:16]}: not a page size (expected e.g. 2Mi, 1Gi)")
            elif amount > self.free_hugepages(numa, size):
                problems.append(
                    f"hugepages-{size} on NUMA {numa}: {amount} bytes booked, "
                    f"{self.free_hugepages(numa, size)} free"
                )
        if problems:
            raise OverlapError(f"assignment of {key} rejected: " + "; ".join(problems))

    def _book(self, key: str, assignment: Assignment) -> None:
        self.assignments[key] = assignment
        for container in assignment.containers.values():
            if container.exclusive:
                for cpu in container.cpus:
                    self._cpu_owner[cpu] = key
            for gpu in container.gpu_indices:
                self._gpu_owner[gpu] = key
            for nic in container.nics:
                self._nic_owner[nic] = key
            for numa, amount in container.memory.items():
                self._memory[int(numa)] = self._memory.get(int(numa), 0) + amount
            for numa, sizes in container.hugepages.items():
                for size, amount in sizes.items():
                    slot = (int(numa), size)
                    self._hugepages[slot] = self._hugepages.get(slot, 0) + amount


def _is_page_size(size: str) -> bool:
    # The length bound keeps hostile keys away from the quantity regex's slow backtracking.
    try:
        return len(size) <= 16 and parse_bytes(size) > 0
    except QuantityError:
        return False
