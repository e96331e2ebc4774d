"""Choosing which GPUs inside the chosen NUMA mask: maximise direct-link bandwidth.

The score of a GPU set is the sum of `gpuLinks[].bandwidthGBps` over its pairs (the link count when
no bandwidth is known); on NVSwitch systems, which list every pair, the lowest indices win. Ties go
to the set with the least bandwidth to the free GPUs left behind (the "cut"), keeping the
best-linked remaining GPUs together for the next job; then the lowest indices. `gpu-links: required`
only accepts sets whose every pair has a direct link; `ignore` takes the lowest free indices.

The search is exact up to `EXACT_LIMIT` candidates and greedy above; results are memoised per
hardware shape (`Tables.key`) by candidate set, as identical nodes see the same few free sets.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

from numatopo_engine.annotations import GpuLinksMode
from numatopo_engine.topology_tables import Tables

# The largest single-node GPU systems (DGX-2, HGX-2) have 16; C(16, 8) sets are cheap once memoised.
EXACT_LIMIT = 16


def set_bandwidth(tables: Tables, gpus: Iterable[int]) -> float:
    chosen = sorted(gpus)
    bandwidth = tables.gpu_bandwidth
    return sum(bandwidth.get((a, b), 0.0) for a, b in combinations(chosen, 2))


def first_unlinked_pair(tables: Tables, gpus: Iterable[int]) -> tuple[int, int] | None:
    return next((p for p in combinations(sorted(gpus), 2) if p not in tables.gpu_bandwidth), None)


GpuMemo = dict[tuple[str, frozenset[int], int, str], tuple[int, ...] | None]


def choose_gpus(
    tables: Tables,
    candidates: frozenset[int],
    count: int,
    mode: GpuLinksMode,
    memo: GpuMemo | None = None,
) -> tuple[int, ...] | None:
    """The best `count` GPUs among `candidates`, or None when no set qualifies; `memo`: the caller's
    (keyed by shape and arguments, so one serves every shape)."""
    if memo is None:
        return _search(tables, sorted(candidates), count, mode)
    key = (tables.key, candidates, count, mode.value)
    if key not in memo:
        memo[key] = _search(tables, sorted(candidates), count, mode)
    return memo[key]


def _search(
    tables: Tables, candidates: list[int], count: int, mode: GpuLinksMode
) -> tuple[int, ...] | None:
    if count > len(candidates):
        return None
    if count == 0 or mode is GpuLinksMode.IGNORE:
        return tuple(candidates[:count])
    size = len(candidates)
    weights = [[tables.gpu_bandwidth.get((a, b), 0.0) for b in candidates] for a in candidates]
    linked = [[a == b or (a, b) in tables.gpu_bandwidth for b in candidates] for a in candidates]
    required = mode is GpuLinksMode.REQUIRED
    distinct = {weights[i][j] for i in range(size) for j in range(size) if i != j}
    if len(distinct) == 1:
        # Every pair alike (NVSwitch, or PCIe only): bandwidth cannot tell sets apart.
        if required and not all(all(row) for row in linked):
            return None
        return tuple(candidates[:count])
    if size > EXACT_LIMIT:
        return _greedy(candidates, weights, linked, count, required=required)
    row_totals = [sum(row) for row in weights]
    best: tuple[float, float, tuple[int, ...]] | None = None
    for combo in combinations(range(size), count):
        inner = 0.0
        unlinked = False
        for position, i in enumerate(combo):
            row = weights[i]
            for j in combo[position + 1 :]:
                inner += row[j]
                if required and not linked[i][j]:
                    unlinked = True
        if unlinked:
            continue
        # Bandwidth from the set to everything else: each GPU's row total minus its links inside the
        # set (counted twice in the sum of rows).
        cut = sum(row_totals[i] for i in combo) - 2 * inner
        key = (-inner, cut, combo)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    return tuple(candidates[i] for i in best[2])


def _greedy(
    candidates: list[int],
    weights: list[list[float]],
    linked: list[list[bool]],
    count: int,
    *,
    required: bool,
) -> tuple[int, ...] | None:
    size = len(candidates)
    chosen: list[int] = []
    while len(chosen) < count:
        best: tuple[float, int] | None = None
        for i in range(size):
            if i in chosen or (required and not all(linked[i][j] for j in chosen)):
                continue
            gain = sum(weights[i][j] for j in chosen) if chosen else sum(weights[i])
            if best is None or (-gain, i) < best:
                best = (-gain, i)
        if best is None:
            return None
        chosen.append(best[1])
    return tuple(sorted(candidates[i] for i in chosen))
