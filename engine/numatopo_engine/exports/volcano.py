"""Volcano's `Numatopology` (`nodeinfo.volcano.sh/v1alpha1`), as its numaaware plugin reads it (the
object Volcano's resource-exporter writes otherwise; fields and amounts: docs/DESIGN.md, "Exports").
`podAllocations` lists the pods numatopo placed, so that numaaware stops holding CPUs for a pod it
scheduled once the pod shows up here.
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar, Literal

from pydantic import Field

from numatopo_engine.annotations import Assignment
from numatopo_engine.devices import schedulable_devices
from numatopo_engine.exports.wire import ForeignObject, ForeignWire
from numatopo_engine.exports.zones import MANAGED_LABEL
from numatopo_engine.model import NumatopologySpec, ObjectMeta
from numatopo_engine.state import NodeState

GROUP = "nodeinfo.volcano.sh"
VERSION = "v1alpha1"
KIND = "Numatopology"


class NumaResource(ForeignWire):
    """`numares` entry: `allocatable` is a cpulist ("0-3,8"), `capacity` a count."""

    allocatable: str
    capacity: int = Field(ge=0)


class CpuInfo(ForeignWire):
    numa: int = Field(ge=0)
    socket: int = Field(ge=0)
    core: int = Field(ge=0)


class ContainerAllocation(ForeignWire):
    """What one container holds: `cpu` a cpulist, anything else a quantity."""

    name: str
    allocations: dict[str, str] = Field(default_factory=dict)


class PodAllocation(ForeignWire):
    uid: str | None = None
    name: str
    namespace: str
    container_allocations: list[ContainerAllocation] = Field(
        default_factory=list, alias="containerAllocations"
    )


class VolcanoSpec(ForeignWire):
    policies: dict[str, str]
    res_reserved: dict[str, str] = Field(default_factory=dict, alias="resReserved")
    numares: dict[str, NumaResource]
    cpu_detail: dict[str, CpuInfo] = Field(alias="cpuDetail")
    pod_allocations: list[PodAllocation] = Field(default_factory=list, alias="podAllocations")


class VolcanoNumatopology(ForeignObject):
    """The whole object, cluster-scoped, named after its node."""

    plural: ClassVar[str] = "numatopologies"

    api_version: Literal["nodeinfo.volcano.sh/v1alpha1"] = Field(
        default="nodeinfo.volcano.sh/v1alpha1", alias="apiVersion"
    )
    kind: Literal["Numatopology"] = "Numatopology"
    metadata: ObjectMeta
    spec: VolcanoSpec


def _cpu_detail(spec: NumatopologySpec) -> dict[str, CpuInfo]:
    """Every online CPU's NUMA node, socket and core; without per-CPU rows, a core of its own on a
    socket numbered as its NUMA node (numaaware then counts no SMT siblings)."""
    online = spec.online_cpus()
    rows = {cpu.id: cpu for cpu in spec.cpus if cpu.online and cpu.id in online}
    detail: dict[str, CpuInfo] = {}
    for node in sorted(spec.numa_nodes, key=lambda n: n.id):
        for cpu_id in node.cpus:
            row = rows.get(cpu_id)
            socket, core = (row.socket, row.core) if row is not None else (node.id, cpu_id)
            detail[str(cpu_id)] = CpuInfo(numa=node.id, socket=socket, core=core)
    return dict(sorted(detail.items(), key=lambda item: int(item[0])))


def _pod_allocation(key: str, assignment: Assignment, spec: NumatopologySpec) -> PodAllocation:
    namespace, _, name = key.partition("/")
    gpu_resource = {d.index: d.resource for d in schedulable_devices(spec)}
    nic_resource = {n.name: n.resource for n in spec.nics}
    containers = []
    for cname, container in sorted(assignment.containers.items()):
        devices = [*container.gpu_indices, *container.mig_indices]
        held = Counter(gpu_resource.get(i, "") for i in devices)
        held.update(nic_resource.get(n, "") for n in container.nics)
        allocations = {r: str(count) for r, count in sorted(held.items()) if r}
        if container.exclusive and container.cpus:
            allocations["cpu"] = str(container.cpus)
        memory = sum(container.memory.values())
        if memory:
            allocations["memory"] = str(memory)
        pages: Counter[str] = Counter()
        for sizes in container.hugepages.values():
            pages.update(sizes)
        allocations.update({f"hugepages-{s}": str(n) for s, n in sorted(pages.items()) if n})
        containers.append(ContainerAllocation(name=cname, allocations=allocations))
    return PodAllocation(name=name, namespace=namespace, container_allocations=containers)


def volcano_numatopology(
    node: str, spec: NumatopologySpec, state: NodeState
) -> VolcanoNumatopology:
    """Volcano's Numatopology of `node`: `spec`'s CPUs, what `state` leaves allocatable."""
    online = spec.online_cpus()
    reserved = spec.reserved_cpus & online
    return VolcanoNumatopology(
        metadata=ObjectMeta(name=node, labels=MANAGED_LABEL),
        spec=VolcanoSpec(
            policies={  # their keys: nodeinfo/v1alpha1 PolicyName
                "CPUManagerPolicy": spec.policies.cpu_manager_policy,
                "TopologyManagerPolicy": spec.policies.topology_manager_policy,
            },
            res_reserved={"cpu": str(len(reserved))} if reserved else {},
            numares={"cpu": NumaResource(allocatable=str(state.free_cpus()), capacity=len(online))},
            cpu_detail=_cpu_detail(spec),
            pod_allocations=[
                _pod_allocation(key, assignment, spec)
                for key, assignment in sorted(state.assignments.items())
            ],
        ),
    )
