"""Merging hints into one NUMA mask, per policy, without ever enumerating 2^N masks.

The kubelet builds every provider's hints over all 2^N masks and merges their cross
product, which is why it caps N at 8. The engine searches the merged result directly:

1. Candidates are only the NUMA nodes with capacity for something the request asks
   for (a GB200-style node with 34 NUMA nodes has 2 with CPUs; its GPU-memory nodes
   never enter a CPU/GPU search).
2. Masks are tried by increasing width, starting at the widest `min_width` among the
   providers (no narrower mask can hold the request on this hardware), up to the
   policy's width bound (8 unless `max-numa-nodes` says otherwise; 1 for
   `single-numa-node`).
3. The search stops at the first width with a preferred mask. A preferred mask is at
   most `1 + sum(min_width - 1)` wide (the union of one preferred hint per provider,
   all sharing a node), so once a non-preferred fit is known and that width is passed,
   nothing better can follow.
4. Within one width, if the candidates would give more than `MASK_BUDGET` masks, only
   the best-stocked candidates are combined (ranked by how much of each request they
   hold on their own). Below the budget, i.e. on every node with up to 16 candidate
   NUMA nodes, the search is exact.

Choice among masks, kubelet's comparator first: preferred over non-preferred; narrower
over wider; then `prefer-closest-numa-nodes` (lower mean SLIT distance); then the
caller's tie-break (GPU link bandwidth, packing); then the lower mask.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb

from numatopo_engine.hints import Resource
from numatopo_engine.numamask import make_mask, mean_distance
from numatopo_engine.policies import PolicyRules

__all__ = ["MASK_BUDGET", "MaskChoice", "candidate_numa_ids", "choose_mask"]

# Masks evaluated per width before the candidate pool is trimmed. C(16, 8) = 12870 fits,
# so nodes with up to 16 candidate NUMA nodes are searched exhaustively; on 64 NUMA nodes
# a width-3 search is trimmed to the best 26 nodes (2600 masks) instead of 41664.
MASK_BUDGET = 16384

TieBreak = Callable[[int], tuple[float, ...]]


@dataclass(frozen=True, slots=True)
class MaskChoice:
    mask: int  # 0: nothing NUMA-bound was requested
    preferred: bool
    evaluated: int  # masks looked at, for tests and benchmarks


def candidate_numa_ids(resources: Sequence[Resource]) -> list[int]:
    ids: set[int] = set()
    for resource in resources:
        ids.update(n for n, amount in resource.capacity.items() if amount > 0)
    return sorted(ids)


def choose_mask(
    resources: Sequence[Resource],
    *,
    rules: PolicyRules,
    max_numa_nodes: int | None,
    distances: dict[tuple[int, int], int],
    tie_break: TieBreak | None = None,
    accept: Callable[[int], bool] | None = None,
) -> MaskChoice | None:
    """The best mask for `resources` under `rules`, or None when the policy admits none."""
    candidates = candidate_numa_ids(resources)
    widths = [r.min_width for r in resources]
    if any(w is None for w in widths):
        return None
    if not candidates:
        fits = all(r.satisfiable(()) for r in resources) and (accept is None or accept(0))
        return MaskChoice(0, True, 1) if fits else None
    min_widths = [w or 1 for w in widths]
    lowest = max(min_widths, default=1)
    highest = min(rules.max_width(max_numa_nodes), len(candidates))
    preferred_bound = 1 + sum(w - 1 for w, r in zip(min_widths, resources, strict=True) if r.narrow)
    evaluated = 0
    fallback: tuple[tuple[float, ...], int] | None = None
    for size in range(lowest, highest + 1):
        best: tuple[tuple[float, ...], int] | None = None
        for ids in combinations(_pool(candidates, resources, size), size):
            evaluated += 1
            numa_ids = list(ids)
            if not all(r.satisfiable(numa_ids) for r in resources):
                continue
            mask = make_mask(numa_ids)
            if accept is not None and not accept(mask):
                continue
            cover = mask
            for resource, min_width in zip(resources, min_widths, strict=True):
                cover &= resource.preferred_cover(numa_ids, min_width)
                if not cover:
                    break
            if not cover and (
                not rules.admits_non_preferred
                or (fallback is not None and fallback[1].bit_count() < size)
            ):
                continue  # non-preferred fits only compete within the first width that had one
            key = (mean_distance(mask, distances), *(tie_break(mask) if tie_break else ()))
            if cover:
                if best is None or (key, mask) < best:
                    best = (key, mask)
            elif fallback is None or (key, mask) < fallback:
                fallback = (key, mask)
        if best is not None:
            return MaskChoice(best[1], True, evaluated)
        if fallback is not None and size >= preferred_bound:
            break
    if fallback is not None:
        return MaskChoice(fallback[1], False, evaluated)
    if rules.may_use_every_node(max_numa_nodes) and len(candidates) > highest:
        mask = make_mask(candidates)
        if all(r.satisfiable(candidates) for r in resources) and (accept is None or accept(mask)):
            return MaskChoice(mask, False, evaluated + 1)
    return None


def _pool(candidates: list[int], resources: Sequence[Resource], size: int) -> list[int]:
    if comb(len(candidates), size) <= MASK_BUDGET:
        return candidates
    keep = size
    while comb(keep + 1, size) <= MASK_BUDGET:
        keep += 1

    def stocked(numa_id: int) -> tuple[float, int]:
        held = sum(
            min(1.0, (r.floating_free + r.free.get(numa_id, 0)) / r.need)
            for r in resources
            if r.need
        )
        return (-held, numa_id)

    return sorted(sorted(candidates, key=stocked)[:keep])
