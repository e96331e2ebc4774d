"""Node score, 0..100, for choosing between nodes that can all host a pod (higher is better).

    score = round(100 * (w_span*span + w_links*links + w_pack*pack) / (w_span + w_links + w_pack))

span   = min_width / width: the fewest NUMA nodes the request could use on this node's
         hardware over the NUMA nodes the placement spans (1.0 = as narrow as possible;
         1.0 when nothing NUMA-bound was placed).
links  = bandwidth(chosen GPUs) / bandwidth(best set of as many GPUs on this hardware),
         summing `gpuLinks` bandwidth over pairs; 1.0 for fewer than 2 GPUs or when the
         hardware has no direct links (PCIe only: nothing to lose).
pack   = how full the touched NUMA nodes are after the placement, for each kind of
         device the pod takes (GPUs, exclusive CPUs), averaged: used / capacity within
         the mask. Best fit: a partly used NUMA node (or node) that still fits scores
         higher than breaking a fully free one, which keeps whole NUMA nodes and NVLink
         cliques free for the next large job.

Weights: with GPUs, w_span=30, w_links=40, w_pack=30: link type drives GPU placement,
so on an NVSwitch machine a pod spanning both NUMA nodes with full bandwidth still
scores 85, not a failure; without GPUs, w_span=60, w_links=0, w_pack=40.
"""

from __future__ import annotations

from collections.abc import Collection

from numatopo_engine.annotations import GpuLinksMode
from numatopo_engine.gpu_assignment import GpuMemo, choose_gpus, set_bandwidth
from numatopo_engine.hints import FreeView
from numatopo_engine.numamask import bits
from numatopo_engine.topology_tables import Tables

__all__ = ["CPU_WEIGHTS", "GPU_WEIGHTS", "best_bandwidth", "compose_score", "placement_score"]

GPU_WEIGHTS = (30, 40, 30)
CPU_WEIGHTS = (60, 0, 40)


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
