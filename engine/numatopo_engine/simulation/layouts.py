"""Node hardware for the simulated cluster: a GPU model + GPU count -> a real layout.

The trace names GPU models and counts but not how GPUs, sockets and NVLinks are wired. A topology
map (`--topology-map`, JSON; the default ships with the CLI) names a layout per model and GPU count:

    {"layouts": {"<name>": {"gpuNuma": [0, 0, 1, 1] | "split",
                            "nvlinks": [[a, b, links], ...], "gbpsPerLink": 25,
                            "source": "...", "why": "..."}},
     "models": {"<model>": {"<gpu count>": "<layout>", "default": "<layout>"}},
     "default": "<layout>"}

`build_node_spec` turns a node row and its layout into a `NumatopologySpec`: two sockets = two NUMA
nodes (one for a node with a single CPU), CPUs numbered as Linux does (first threads of every core,
then their hyper-thread siblings; no HT when a socket's CPU count is odd), memory split evenly.
"split" puts the first half of the GPUs on NUMA node 0 and the rest on node 1, as 2-socket PCIe
servers wire them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Cpu, Gpu, GpuLink, GpuPath, NumaNode, NumatopologySpec, PathType
from numatopo_engine.simulation.trace import MIB, NodeRow

# SLIT distances of a typical 2-socket Xeon (local 10, remote 21).
REMOTE_DISTANCE = 21


class TopologyMapError(ValueError):
    """The topology map is malformed or does not cover a node of the cluster."""


@dataclass(frozen=True, slots=True)
class Layout:
    name: str
    gpu_numa: tuple[int, ...] | None  # None: split the GPUs evenly over the sockets
    nvlinks: tuple[tuple[int, int, int], ...] = ()
    gbps_per_link: float = 25.0
    gpus: int | None = None  # the GPU count the NVLink matrix is written for

    def numa_of(self, gpu_index: int, gpu_count: int) -> int:
        if self.gpu_numa is not None and gpu_index < len(self.gpu_numa):
            return self.gpu_numa[gpu_index]
        return gpu_index * 2 // gpu_count if gpu_count > 1 else 0


@dataclass(frozen=True, slots=True)
class TopologyMap:
    layouts: Mapping[str, Layout]
    models: Mapping[str, Mapping[str, str]]
    default: str

    def layout_for(self, model: str, gpus: int) -> Layout:
        by_count = self.models.get(model, {})
        name = by_count.get(str(gpus)) or by_count.get("default") or self.default
        return self.layouts[name]


def _layout(name: str, raw: Any) -> Layout:
    if not isinstance(raw, Mapping):
        raise TopologyMapError(f"layout {name!r}: expected an object, got {type(raw).__name__}")
    numa_raw = raw.get("gpuNuma", "split")
    gpu_numa: tuple[int, ...] | None = None
    if numa_raw != "split":
        if not isinstance(numa_raw, list) or not all(isinstance(x, int) for x in numa_raw):
            raise TopologyMapError(f"layout {name!r}: gpuNuma must be 'split' or a list of ints")
        gpu_numa = tuple(numa_raw)
    links: list[tuple[int, int, int]] = []
    for item in raw.get("nvlinks", []):
        if not (
            isinstance(item, list) and len(item) == 3 and all(isinstance(x, int) for x in item)
        ):
            raise TopologyMapError(f"layout {name!r}: nvlinks entry {item!r} is not [a, b, links]")
        a, b, count = item
        if a == b or count <= 0:
            raise TopologyMapError(f"layout {name!r}: nvlinks entry {item!r} is not a link")
        links.append((min(a, b), max(a, b), count))
    gpus = max((b for _, b, _ in links), default=-1) + 1 or None
    if gpu_numa is not None:
        gpus = max(gpus or 0, len(gpu_numa))
    gbps = raw.get("gbpsPerLink", 25.0)
    if not isinstance(gbps, int | float) or gbps <= 0:
        raise TopologyMapError(f"layout {name!r}: gbpsPerLink must be a positive number")
    return Layout(name, gpu_numa, tuple(links), float(gbps), gpus)


def parse_topology_map(data: Mapping[str, Any]) -> TopologyMap:
    """Validate a topology map (the JSON described in this module's docstring)."""
    raw_layouts = data.get("layouts")
    if not isinstance(raw_layouts, Mapping) or not raw_layouts:
        raise TopologyMapError("topology map: 'layouts' must be a non-empty object")
    layouts = {name: _layout(name, raw) for name, raw in raw_layouts.items()}
    raw_models = data.get("models", {})
    if not isinstance(raw_models, Mapping):
        raise TopologyMapError("topology map: 'models' must be an object")
    models: dict[str, dict[str, str]] = {}
    for model, by_count in raw_models.items():
        if not isinstance(by_count, Mapping):
            raise TopologyMapError(f"topology map: model {model!r} must map GPU counts to layouts")
        for count, name in by_count.items():
            if name not in layouts:
                raise TopologyMapError(
                    f"topology map: model {model!r} ({count} GPUs) names unknown layout {name!r}"
                )
        models[model] = dict(by_count)
    default = data.get("default", "")
    if default not in layouts:
        raise TopologyMapError(f"topology map: 'default' names unknown layout {default!r}")
    return TopologyMap(layouts, models, default)


def _cpus(cpu_count: int, memory: int) -> tuple[list[NumaNode], list[Cpu]]:
    sockets = 2 if cpu_count >= 2 else 1
    per_socket = cpu_count // sockets
    threads = 2 if per_socket % 2 == 0 and per_socket >= 2 else 1
    cores = per_socket // threads
    cpus: list[Cpu] = []
    members: dict[int, list[int]] = {s: [] for s in range(sockets)}
    for thread in range(threads):
        for socket in range(sockets):
            for core in range(cores):
                cpu_id = thread * sockets * cores + socket * cores + core
                first = socket * cores + core
                cpus.append(Cpu(id=cpu_id, core=first, socket=socket, numa=socket))
                members[socket].append(cpu_id)
    numa = [
        NumaNode(
            id=s,
            cpus=CPUSet(members[s]),
            memory_bytes=memory // sockets + (memory % sockets if s == 0 else 0),
            distances={str(o): (10 if o == s else REMOTE_DISTANCE) for o in range(sockets)},
        )
        for s in range(sockets)
    ]
    return numa, cpus


def build_node_spec(node: NodeRow, layout: Layout) -> NumatopologySpec:
    """The Numatopology spec of one trace node laid out as `layout` says."""
    numa, cpus = _cpus(max(1, node.cpu_milli // 1000), node.memory_mib * MIB)
    gpus = [
        Gpu(index=i, numa=min(layout.numa_of(i, node.gpus), len(numa) - 1), model=node.model)
        for i in range(node.gpus)
    ]
    nvlinks = layout.nvlinks if layout.gpus == node.gpus else ()  # written for that GPU count
    links = [
        GpuLink(a=a, b=b, links=n, bandwidth_g_bps=n * layout.gbps_per_link) for a, b, n in nvlinks
    ]
    linked = {(x.a, x.b) for x in links}
    paths = [
        GpuPath(a=a.index, b=b.index, path=PathType.NODE if a.numa == b.numa else PathType.SYS)
        for a, b in combinations(gpus, 2)
        if (a.index, b.index) not in linked
    ]
    return NumatopologySpec(
        numa_nodes=numa,
        cpus=cpus,
        gpus=gpus,
        gpu_links=links,
        gpu_paths=paths,
        sources=[f"simulate:{layout.name}"],
    )


class LinkTable:
    """Direct-link GB/s between a node's GPUs, and the best sum over pairs any k reach."""

    def __init__(self, spec: NumatopologySpec) -> None:
        self.gpu_count = len(spec.gpus)
        self.gpu_numa = tuple(g.numa or 0 for g in spec.gpus)
        self._gbps: dict[tuple[int, int], float] = {
            (x.a, x.b): x.bandwidth_g_bps for x in spec.gpu_links
        }
        self._best: dict[int, float] = {}
        self.max_gpus_per_numa = max(Counter(self.gpu_numa).values(), default=0)

    def gbps(self, a: int, b: int) -> float:
        return self._gbps.get((min(a, b), max(a, b)), 0.0)

    def aggregate(self, gpus: tuple[int, ...] | list[int]) -> float:
        return sum(self.gbps(a, b) for a, b in combinations(gpus, 2))

    def best_aggregate(self, k: int) -> float:
        """The highest aggregate bandwidth of any k GPUs of this node (exhaustive, cached)."""
        if k not in self._best:
            self._best[k] = max(
                (self.aggregate(c) for c in combinations(range(self.gpu_count), k)), default=0.0
            )
        return self._best[k]
