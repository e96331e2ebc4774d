"""Invariants of one engine decision, checked from the spec alone (not from `NodeState`).

Each check raises AssertionError with what was wrong; a test calls them after every
`allocate`. They recompute what they need from the topology so that a bug shared by
the engine and `NodeState` still shows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from numatopo_engine.annotations import Assignment, ContainerAssignment, CpuMode, PolicyName, Scope
from numatopo_engine.model import NumaNode, NumatopologySpec
from numatopo_engine.quantity import parse_bytes
from numatopo_engine.request import ContainerRequest, PodRequest


def _cpu_numa(spec: NumatopologySpec) -> dict[int, int]:
    return {cpu: node.id for node in spec.numa_nodes for cpu in node.cpus}


def allocatable(spec: NumatopologySpec) -> frozenset[int]:
    """Online CPUs that are not reserved: the only CPUs any container may run on."""
    offline = {cpu.id for cpu in spec.cpus if not cpu.online}
    return frozenset(spec.online_cpus().ids - spec.reserved_cpus.ids - offline)


def check_within_node(spec: NumatopologySpec, assignment: Assignment) -> None:
    """Only CPUs, GPUs, NICs and NUMA nodes the node has, CPUs never offline or reserved."""
    usable = allocatable(spec)
    gpus = {gpu.index for gpu in spec.gpus}
    nics = {nic.name for nic in spec.nics}
    numa = {node.id for node in spec.numa_nodes}
    for name, container in assignment.containers.items():
        assert container.cpus.ids <= usable, f"{name}: CPUs {container.cpus} not allocatable"
        assert set(container.gpu_indices) <= gpus, f"{name}: unknown GPU"
        assert set(container.nics) <= nics, f"{name}: unknown NIC"
        assert container.mems.ids <= numa, f"{name}: mems {container.mems} not NUMA nodes"
        booked_on = {int(n) for n in container.memory} | {int(n) for n in container.hugepages}
        assert booked_on <= container.mems.ids, f"{name}: memory booked outside its mems"


def check_local(spec: NumatopologySpec, request: PodRequest, assignment: Assignment) -> None:
    """Under `restricted` and `single-numa-node` (preferred placements only), every
    exclusive CPU and every GPU of known NUMA lies on the container's `mems`. Under
    `best-effort` and `none` the kubelet tops an unaligned placement up from anywhere."""
    if request.options.policy not in (PolicyName.RESTRICTED, PolicyName.SINGLE_NUMA_NODE):
        return
    cpu_numa = _cpu_numa(spec)
    gpu_numa = {gpu.index: gpu.numa for gpu in spec.gpus}
    for name, container in assignment.containers.items():
        if not container.mems:
            continue
        used = {cpu_numa[c] for c in container.cpus} | {
            gpu_numa[g] for g in container.gpu_indices if gpu_numa[g] is not None
        }
        assert used <= container.mems.ids, f"{name}: uses NUMA {used}, mems {container.mems}"


def check_gets_what_it_asked(request: PodRequest, assignment: Assignment) -> None:
    """Exclusive CPUs, GPUs, NICs, memory and huge pages booked add up to the request."""
    asked = request.containers
    got = assignment.containers.values()
    exclusive = [c for c in got if c.exclusive]
    if request.options.cpu is CpuMode.EXCLUSIVE:
        assert sum(len(c.cpus) for c in exclusive) == sum(c.cpu_milli // 1000 for c in asked)
    else:
        assert not exclusive or all(not c.cpus for c in exclusive), "shared pod holds CPUs"
    assert sum(len(c.gpu_indices) for c in got) == sum(c.gpus for c in asked)
    assert sum(len(c.nics) for c in got) == sum(c.nics for c in asked)
    assert sum(sum(c.memory.values()) for c in got) == sum(c.memory_bytes for c in asked)
    booked: Counter[str] = Counter()
    for container in got:
        for sizes in container.hugepages.values():
            booked.update(sizes)
    wanted: Counter[str] = Counter()
    for container in asked:
        wanted.update(container.hugepages)
    assert +booked == +wanted, f"huge pages booked {dict(booked)}, asked {dict(wanted)}"


def check_capacity(spec: NumatopologySpec, assignments: Iterable[Assignment]) -> None:
    """All placed pods together: nothing held twice, no NUMA node's memory over-booked."""
    cpus: Counter[int] = Counter()
    gpus: Counter[int] = Counter()
    nics: Counter[str] = Counter()
    memory: Counter[int] = Counter()
    hugepages: Counter[tuple[int, str]] = Counter()
    for assignment in assignments:
        for container in assignment.containers.values():
            if container.exclusive:
                cpus.update(container.cpus.ids)
            gpus.update(container.gpu_indices)
            nics.update(container.nics)
            for numa, amount in container.memory.items():
                memory[int(numa)] += amount
            for numa, sizes in container.hugepages.items():
                for size, amount in sizes.items():
                    hugepages[(int(numa), size)] += amount
    assert [c for c, n in cpus.items() if n > 1] == [], "an exclusive CPU held twice"
    assert [g for g, n in gpus.items() if n > 1] == [], "a GPU held twice"
    assert [x for x, n in nics.items() if n > 1] == [], "a NIC held twice"
    for node in spec.numa_nodes:
        assert memory[node.id] <= node.memory_bytes, f"NUMA {node.id} memory over-booked"
        for size, pages in node.hugepages.items():
            assert hugepages[(node.id, size)] <= pages * parse_bytes(size), (
                f"NUMA {node.id} hugepages-{size} over-booked"
            )


def check_shared_cpus_free(assignment: Assignment, held: frozenset[int]) -> None:
    """A `cpu: numa` container runs on the shared pool: no CPU another pod holds."""
    for name, container in assignment.containers.items():
        if not container.exclusive:
            assert not (container.cpus.ids & held), f"{name}: shared CPUs overlap exclusive ones"


def check_single_numa(request: PodRequest, assignment: Assignment) -> None:
    """`single-numa-node`: one NUMA node per pod (scope pod) or per container."""
    if request.options.policy is not PolicyName.SINGLE_NUMA_NODE:
        return
    bound = [c.name for c in request.containers if _needs([c], request.options.cpu)]
    if request.options.scope is Scope.POD and bound:
        assert len(assignment.numa_nodes) <= 1, f"spans NUMA {assignment.numa_nodes}"
    for name in bound:
        container = assignment.containers[name]
        assert len(container.mems) <= 1, f"{name}: spans NUMA {container.mems}"


# -- restricted: an independent reading of the kubelet's "preferred" ------------------


@dataclass(frozen=True)
class Free:
    """What is free per NUMA node before a placement unit is placed, in plain numbers."""

    cpus: Mapping[int, int]
    memory: Mapping[int, int]
    hugepages: Mapping[tuple[int, str], int]
    gpus: Mapping[int | None, int]  # None: GPUs of unknown NUMA, usable from any mask
    nics: Mapping[int | None, int]


def pod_memory_nodes(spec: NumatopologySpec) -> list[NumaNode]:
    """The NUMA nodes that serve a pod's memory: those with CPUs, when there are any.

    Memory-only nodes (KNL MCDRAM in flat mode, CXL expanders, GPU HBM) are the
    engine's documented exception (`topology_tables`): ordinary pod memory is not
    bound there.
    """
    with_cpus = [node for node in spec.numa_nodes if node.cpus]
    return with_cpus or list(spec.numa_nodes)


def free_before(spec: NumatopologySpec, placed: Iterable[Assignment]) -> Free:
    cpu_numa = _cpu_numa(spec)
    usable = allocatable(spec)
    cpus = Counter(cpu_numa[c] for c in usable)
    memory = Counter({node.id: node.memory_bytes for node in pod_memory_nodes(spec)})
    hugepages = Counter(
        {
            (node.id, size): pages * parse_bytes(size)
            for node in spec.numa_nodes
            for size, pages in node.hugepages.items()
        }
    )
    gpu_numa = {gpu.index: gpu.numa for gpu in spec.gpus}
    nic_numa = {nic.name: nic.numa for nic in spec.nics}
    gpus: Counter[int | None] = Counter(gpu_numa.values())
    nics: Counter[int | None] = Counter(nic_numa.values())
    for assignment in placed:
        for container in assignment.containers.values():
            if container.exclusive:
                cpus.subtract(cpu_numa[c] for c in container.cpus)
            gpus.subtract(gpu_numa[g] for g in container.gpu_indices)
            nics.subtract(nic_numa[n] for n in container.nics)
            for numa, amount in container.memory.items():
                memory[int(numa)] -= amount
            for numa, sizes in container.hugepages.items():
                for size, amount in sizes.items():
                    hugepages[(int(numa), size)] -= amount
    return Free(cpus=cpus, memory=memory, hugepages=hugepages, gpus=gpus, nics=nics)


def _needs(containers: Sequence[ContainerRequest], cpu_mode: CpuMode) -> list[tuple[str, int]]:
    """(resource, amount) for every NUMA-bound resource the unit asks for."""
    needs = [
        (
            "cpu",
            sum(c.cpu_milli // 1000 for c in containers) if cpu_mode is CpuMode.EXCLUSIVE else 0,
        ),
        ("memory", sum(c.memory_bytes for c in containers)),
        ("gpu", sum(c.gpus for c in containers)),
        ("nic", sum(c.nics for c in containers)),
    ]
    sizes = sorted({size for c in containers for size in c.hugepages})
    needs += [(f"hugepages-{s}", sum(c.hugepages.get(s, 0) for c in containers)) for s in sizes]
    return [(resource, amount) for resource, amount in needs if amount > 0]


def _amount(free: Free, resource: str, mask: Sequence[int]) -> int:
    if resource == "cpu":
        return sum(free.cpus.get(n, 0) for n in mask)
    if resource == "memory":
        return sum(free.memory.get(n, 0) for n in mask)
    if resource in ("gpu", "nic"):
        devices = free.gpus if resource == "gpu" else free.nics
        return sum(devices.get(n, 0) for n in mask) + devices.get(None, 0)
    size = resource.removeprefix("hugepages-")
    return sum(free.hugepages.get((n, size), 0) for n in mask)


def _min_width(capacity: Free, resource: str, amount: int, numa_ids: Sequence[int]) -> int | None:
    for width in range(1, len(numa_ids) + 1):
        if any(_amount(capacity, resource, m) >= amount for m in combinations(numa_ids, width)):
            return width
    return None


def hardware(spec: NumatopologySpec) -> Free:
    """What the kubelet's hint providers count as capacity: every online CPU (reserved
    ones too), memory of the pod-memory nodes, devices that have a NUMA node."""
    cpus = Counter(node.id for node in spec.numa_nodes for _ in node.cpus)
    everything = free_before(spec, [])
    gpus: Counter[int | None] = Counter(g.numa for g in spec.gpus if g.numa is not None)
    nics: Counter[int | None] = Counter(n.numa for n in spec.nics if n.numa is not None)
    return Free(cpus=cpus, memory=everything.memory, hugepages=everything.hugepages,
                gpus=gpus, nics=nics)  # fmt: skip


def check_restricted_unit(
    spec: NumatopologySpec,
    free: Free,
    containers: Sequence[ContainerRequest],
    cpu_mode: CpuMode,
    mems: frozenset[int],
) -> None:
    """`mems` is a preferred placement in the kubelet's sense (1.24+): for every resource
    it is itself a preferred hint, as narrow as the hardware allows for the request,
    and it holds the request from what is free (devices on no NUMA node count nowhere;
    a device kind none of which has a NUMA node has no preference)."""
    numa_ids = sorted(node.id for node in spec.numa_nodes)
    capacity = hardware(spec)
    if cpu_mode is not CpuMode.EXCLUSIVE:
        capacity = Free(
            cpus=free_before(spec, []).cpus,
            memory=capacity.memory,
            hugepages=capacity.hugepages,
            gpus=capacity.gpus,
            nics=capacity.nics,
        )
    located = Free(
        cpus=free.cpus,
        memory=free.memory,
        hugepages=free.hugepages,
        gpus=Counter({n: v for n, v in free.gpus.items() if n is not None}),
        nics=Counter({n: v for n, v in free.nics.items() if n is not None}),
    )
    inside = sorted(mems)
    for resource, amount in _needs(containers, cpu_mode):
        if resource in ("gpu", "nic") and not sum(
            (capacity.gpus if resource == "gpu" else capacity.nics).values()
        ):
            continue
        width = _min_width(capacity, resource, amount, numa_ids)
        assert width is not None, f"{resource}: {amount} more than the node has"
        assert len(inside) == width, f"{resource}: NUMA {inside} is not {width} wide"
        assert _amount(located, resource, inside) >= amount, f"{resource}: NUMA {inside} short"


def check_restricted(
    spec: NumatopologySpec,
    request: PodRequest,
    assignment: Assignment,
    placed: Sequence[Assignment],
) -> None:
    """`restricted` admits only preferred placements, per pod or per container."""
    if request.options.policy is not PolicyName.RESTRICTED:
        return
    mode = request.options.cpu
    if request.options.scope is Scope.POD:
        mems = frozenset(assignment.numa_nodes)
        check_restricted_unit(spec, free_before(spec, placed), request.containers, mode, mems)
        return
    earlier: list[Assignment] = list(placed)
    for container in request.containers:
        entry: ContainerAssignment = assignment.containers[container.name]
        free = free_before(spec, earlier)
        check_restricted_unit(spec, free, [container], mode, entry.mems.ids)
        earlier.append(assignment.model_copy(update={"containers": {container.name: entry}}))
