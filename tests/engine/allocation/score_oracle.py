"""The node score of one placement, term by term (a test oracle).

The formula is `numatopo_engine.scoring`'s; production computes it for every node of a
shape at once (`numatopo_engine.decision`). These scalar versions score one assignment
on one node, for the tests that compare the vectorised score with them.
"""

from __future__ import annotations

from collections.abc import Collection

from numatopo_engine.allocation import Engine
from numatopo_engine.annotations import Assignment, GpuLinksMode
from numatopo_engine.gpu_assignment import GpuMemo, choose_gpus, set_bandwidth
from numatopo_engine.hints import FreeView, Need
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.numamask import bits, make_mask
from numatopo_engine.request import TopologyOptions
from numatopo_engine.scoring import CPU_WEIGHTS, GPU_WEIGHTS
from numatopo_engine.state import NodeState
from numatopo_engine.topology_tables import Tables


def node_score(
    topology: NumatopologySpec,
    state: NodeState,
    assignment: Assignment,
    *,
    engine: Engine | None = None,
) -> int:
    """Score `assignment` on a node whose allocations (without it) are `state`."""
    engine = engine or Engine()
    tables = engine.tables_of(topology, state)
    free = FreeView.from_state(tables, state)
    gpus = sorted(
        {g for c in assignment.containers.values() for g in (*c.gpu_indices, *c.mig_indices)}
    )
    cpus = len({cpu for c in assignment.containers.values() if c.exclusive for cpu in c.cpus})
    resources = {tables.gpu_resource[g] for g in gpus if g in tables.gpu_resource}
    gpu_resource = resources.pop() if len(resources) == 1 else None
    need = Need(
        cpus=cpus,
        memory_bytes=sum(sum(c.memory.values()) for c in assignment.containers.values()),
        gpus=len(gpus),
        gpu_resource=gpu_resource,
    )
    narrowest = engine.plan(tables, need, TopologyOptions(), floor=0, closest=False).narrowest
    return placement_score(
        tables, free, mask=make_mask(assignment.numa_nodes), min_width=narrowest, cpus=cpus,
        gpus=gpus, gpu_resource=gpu_resource, memo=engine.gpu_memo,
    )  # fmt: skip


def best_bandwidth(
    tables: Tables, gpu_resource: str | None, count: int, memo: GpuMemo | None = None
) -> float:
    """The highest aggregate link bandwidth any `count` GPUs of the hardware reach."""
    every = frozenset(
        g for g, r in tables.gpu_resource.items() if gpu_resource is None or r == gpu_resource
    )
    chosen = choose_gpus(tables, every, count, GpuLinksMode.PREFERRED, memo)
    return set_bandwidth(tables, chosen) if chosen else 0.0


def placement_score(
    tables: Tables,
    free: FreeView,
    *,
    mask: int,
    min_width: int,
    cpus: int,
    gpus: Collection[int],
    gpu_resource: str | None,
    memo: GpuMemo | None = None,
) -> int:
    """The score of placing `cpus` exclusive CPUs and `gpus` in `mask`, given what is `free`."""
    numa_ids = bits(mask)
    span = min(1.0, min_width / len(numa_ids)) if numa_ids else 1.0
    links = 1.0
    if len(gpus) >= 2:
        best = best_bandwidth(tables, gpu_resource, len(gpus), memo)
        if best > 0:
            links = set_bandwidth(tables, gpus) / best
    fills: list[float] = []
    if gpus:
        in_mask = [g for g, n in tables.gpu_numa.items() if n is None or n in numa_ids]
        if in_mask:
            used = sum(1 for g in in_mask if g not in free.gpus) + len(gpus)
            fills.append(min(1.0, used / len(in_mask)))
    if cpus:
        capacity = sum(len(tables.numa_allocatable[n]) for n in numa_ids)
        if capacity:
            free_in_mask = sum(len(free.cpus & tables.numa_allocatable[n]) for n in numa_ids)
            fills.append(min(1.0, (capacity - free_in_mask + cpus) / capacity))
    return compose_score(span, links, fills, with_gpus=bool(gpus))


def compose_score(span: float, links: float, fills: list[float], *, with_gpus: bool) -> int:
    """The weighted sum of the formula's terms; `fills` are the pack terms (GPUs first)."""
    pack = sum(fills) / len(fills) if fills else 1.0
    w_span, w_links, w_pack = GPU_WEIGHTS if with_gpus else CPU_WEIGHTS
    total = w_span * span + w_links * links + w_pack * pack
    return max(0, min(100, round(100 * total / (w_span + w_links + w_pack))))
