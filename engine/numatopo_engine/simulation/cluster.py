"""The simulated cluster: per-node counters every strategy books into.

Counters are what a topology-blind scheduler sees (free CPU milli, memory, GPUs and each GPU's free
share), plus the whole CPUs still free per NUMA node (for the topology-aware strategies and the
kubelet's admission). The `numatopo` strategy also keeps the engine's `NodeState` per node
(`SimNode.state`), of the node's own spec (`fleet.identify`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from numatopo_engine.model import NumatopologySpec
from numatopo_engine.simulation.fleet import identify
from numatopo_engine.simulation.layouts import (
    LinkTable,
    TopologyMap,
    TopologyMapError,
    build_node_spec,
)
from numatopo_engine.simulation.trace import GPU_MILLI, NodeRow, PodRow
from numatopo_engine.state import NodeState


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What nodes of one kind share: the spec and its link table (built once per kind)."""

    spec: NumatopologySpec
    links: LinkTable
    numa_cpus: tuple[int, ...]


@dataclass(slots=True)
class SimNode:
    name: str
    model: str
    shape: NodeShape
    free_cpu_milli: int
    free_memory_mib: int
    gpu_free: list[int]
    numa_free_cpus: list[int]
    cpu_milli: int = 0  # capacity, what `free_cpu_milli` starts at
    memory_mib: int = 0  # capacity, what `free_memory_mib` starts at
    full_free: int = 0
    max_gpu_free: int = 0
    state: NodeState | None = None

    @property
    def spec(self) -> NumatopologySpec:
        """The node's own spec (its names too) where it has engine state, else its shape's."""
        return self.state.topology if self.state is not None else self.shape.spec

    def refresh_gpu_counters(self) -> None:
        self.full_free = sum(1 for milli in self.gpu_free if milli == GPU_MILLI)
        self.max_gpu_free = max(self.gpu_free, default=0)

    def untouched(self) -> bool:
        """Nothing placed here yet (the node could still be drained or host the largest pod)."""
        return (
            self.free_cpu_milli == self.cpu_milli
            and self.free_memory_mib == self.memory_mib
            and self.full_free == len(self.gpu_free)
        )

    def free_whole_gpus(self) -> list[int]:
        return [i for i, milli in enumerate(self.gpu_free) if milli == GPU_MILLI]


def tightest_share(gpu_free: Sequence[int], milli: int) -> int:
    """Best fit for a GPU share: the GPU with the least free share that still holds it."""
    return min((free, i) for i, free in enumerate(gpu_free) if free >= milli)[1]


@dataclass(slots=True)
class Cluster:
    nodes: list[SimNode]
    total_gpu_milli: int
    max_cpu_milli: int
    max_gpu_milli: int
    used_gpu_milli: int = 0
    model_index: dict[str, frozenset[int]] = field(default_factory=dict)

    def candidates(self, pod: PodRow) -> list[int]:
        """Indices of nodes that pass the count filter (kube-scheduler NodeResourcesFit and a
        GPU-share filter) and the pod's GPU-model constraint."""
        allowed: frozenset[int] | None = None
        if pod.gpu_spec:
            allowed = frozenset().union(
                *(self.model_index.get(m, frozenset()) for m in pod.gpu_spec)
            )
        cpu, mem, fractional = pod.cpu_milli, pod.memory_mib, pod.fractional
        gpus = pod.gpu_milli if fractional else pod.whole_gpus  # a share, or whole GPUs
        out = [
            i
            for i, n in enumerate(self.nodes)
            if (n.max_gpu_free if fractional else n.full_free) >= gpus
            and n.free_cpu_milli >= cpu
            and n.free_memory_mib >= mem
        ]
        return out if allowed is None else [i for i in out if i in allowed]

    def book(
        self, index: int, pod: PodRow, *, gpus: Sequence[int], exclusive_cpus: Mapping[int, int]
    ) -> None:
        """Take `pod`'s resources on node `index`: its GPUs and exclusive CPUs per NUMA node."""
        node = self.nodes[index]
        node.free_cpu_milli -= pod.cpu_milli
        node.free_memory_mib -= pod.memory_mib
        share = pod.gpu_milli if pod.fractional else GPU_MILLI
        for gpu in gpus:
            node.gpu_free[gpu] -= share
            self.used_gpu_milli += share
        for numa, count in exclusive_cpus.items():
            node.numa_free_cpus[numa] -= count
        node.refresh_gpu_counters()

    def best_fit_score(self, index: int, pod: PodRow) -> int:
        """FGD simulator's BestFit score in 0..100, higher = tighter fit (CPU and GPU, 50/50)."""
        node = self.nodes[index]
        left = (
            0.5 * (node.free_cpu_milli - pod.cpu_milli) / self.max_cpu_milli
            + 0.5 * (sum(node.gpu_free) - pod.total_gpu_milli) / self.max_gpu_milli
        )
        return int((1.0 - left) * 100)


def build_cluster(
    rows: Sequence[NodeRow],
    topology_map: TopologyMap | None,
    *,
    specs: Mapping[str, NumatopologySpec] | None = None,
    with_engine_state: bool = False,
) -> Cluster:
    """One `SimNode` per row, specs built once per (model, GPUs, CPUs, memory) shape; a node named
    in `specs` (e.g. from `numatopo inspect -o json`) uses that spec instead of the map's layout."""
    given = specs or {}
    shapes: dict[tuple[str, int, int, int], NodeShape] = {}
    nodes: list[SimNode] = []
    model_index: dict[str, set[int]] = {}
    for index, row in enumerate(rows):
        key = (row.model, row.gpus, row.cpu_milli, row.memory_mib)
        if row.name in given:
            key = (f"spec:{row.name}", 0, 0, 0)
        if key not in shapes:
            if row.name in given:
                spec = given[row.name]
            elif topology_map is not None:
                spec = build_node_spec(row, topology_map.layout_for(row.model, row.gpus))
            else:
                raise TopologyMapError(f"node {row.name}: no spec given and no topology map")
            shapes[key] = NodeShape(
                spec=spec,
                links=LinkTable(spec),
                numa_cpus=tuple(len(n.cpus) for n in spec.numa_nodes),
            )
        shape = shapes[key]
        node = SimNode(
            name=row.name,
            model=row.model,
            shape=shape,
            free_cpu_milli=row.cpu_milli,
            free_memory_mib=row.memory_mib,
            gpu_free=[GPU_MILLI] * row.gpus,
            numa_free_cpus=list(shape.numa_cpus),
            cpu_milli=row.cpu_milli,
            memory_mib=row.memory_mib,
            state=NodeState(identify(shape.spec, row.name)) if with_engine_state else None,
        )
        node.refresh_gpu_counters()
        nodes.append(node)
        model_index.setdefault(row.model, set()).add(index)
    return Cluster(
        nodes=nodes,
        total_gpu_milli=sum(r.gpus for r in rows) * GPU_MILLI,
        max_cpu_milli=max((r.cpu_milli for r in rows), default=1) or 1,
        max_gpu_milli=max((r.gpus for r in rows), default=1) * GPU_MILLI or GPU_MILLI,
        model_index={m: frozenset(ix) for m, ix in model_index.items()},
    )
