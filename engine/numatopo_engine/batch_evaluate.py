"""`fast_evaluate.decide` for many nodes of one hardware shape at once, over numpy arrays.

A scheduler asks one pod of thousands of nodes that share a handful of hardware shapes.
Per shape, each node's free amounts are one row of integers (`NodeState.free_row`),
so the rows stack into a matrix and `decide`'s search runs column-wise: for every
candidate NUMA mask, in `decide`'s order, feasibility, the preferred cover and the
tie-break key are array expressions over all nodes, and the running best (and
fallback) per node is updated where the new key compares lower. The score is
`scoring.compose_score`'s arithmetic on arrays, term by term in the same order, so
every float is the same IEEE double (`rint` rounds half to even, as `round` does).

`bulk_plan` answers None (decide node by node) for what this module does not model:
NICs (free NICs are names, not a row column), `smt: full-cores` (whole free cores
need the CPU bitmask), `gpu-links: required` (its refusal names a pair), GPU indices
of 16 or more (the bandwidth look-up array is indexed by the free GPU bitmask) and
NUMA ids of 62 or more (masks are 64-bit columns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from numatopo_engine.fast_evaluate import CandidateMask, Plan, explain_amounts
from numatopo_engine.gpu_assignment import choose_gpus, set_bandwidth
from numatopo_engine.hints import Resource
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.numamask import bits, make_mask
from numatopo_engine.scoring import _CPU_WEIGHTS, _GPU_WEIGHTS
from numatopo_engine.state import RowLayout, row_layout
from numatopo_engine.topology_tables import Tables

__all__ = [
    "GENERAL",
    "REFUSED",
    "BulkPlan",
    "bulk_plan",
    "decide_many",
    "refusal_reason",
    "stack",
]

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
# One provider's free amount per candidate position, and off-NUMA, for every node.
Reader = Callable[[Ints], tuple[list[Ints], Ints]]

REFUSED = -1  # `decide` refuses the node for want of room (`fast_evaluate.refusal_reason`)
GENERAL = -2  # `decide` hands the node to the general path
_PLANS_SIZE = 4096
_MAX_GPU_BITS = 16
_MAX_NUMA_ID = 61
_UNKNOWN = np.nan  # bandwidth not looked up yet
_NO_SET = -1.0  # `choose_gpus` picks no set


@dataclass(frozen=True, slots=True)
class _Entry:
    """One candidate NUMA mask of the plan, with what the arrays need of it."""

    index: int
    mask: int
    positions: tuple[int, ...]
    distance: float
    subsets: tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]
    gpu_bits: int
    any_gpu_bits: int
    any_gpu_count: int
    cpu_capacity: int
    numa_columns: tuple[int, ...]  # row columns of its NUMA nodes' free CPUs


@dataclass(frozen=True, slots=True)
class BulkPlan:
    """A `Plan` made column-wise: readers over the row matrix and per-entry arrays."""

    plan: Plan
    width: int  # of a row
    readers: tuple[Reader, ...]
    needs: tuple[int, ...]
    by_width: tuple[tuple[int, tuple[_Entry, ...]], ...]
    every: _Entry | None
    bandwidths: Floats  # by free candidate GPU bitmask; empty when no GPUs are asked
    # Per entry index, for the score of the chosen one.
    entry_widths: Ints
    entry_gpu_bits: Ints
    entry_any_gpu_bits: Ints
    entry_any_gpu_count: Ints
    entry_cpu_capacity: Ints
    entry_numa: Ints  # (entries, NUMA nodes) 0/1: which CPU columns the mask holds


def bulk_plan(
    tables: Tables, token: object, plan: Plan, topology: NumatopologySpec
) -> BulkPlan | None:
    """The plan's arrays, or None when nodes go one by one; cached on `tables` under the
    request's token (as `tables.evaluate_plans` holds the plan)."""
    cached = tables.bulk_plans.get(token)
    if isinstance(cached, tuple) and cached[0] is plan:
        built: BulkPlan | None = cached[1]
        return built
    if len(tables.bulk_plans) >= _PLANS_SIZE:
        tables.bulk_plans.clear()
    built = _build(tables, plan, row_layout(topology))
    tables.bulk_plans[token] = (plan, built)
    return built


def _build(tables: Tables, plan: Plan, layout: RowLayout) -> BulkPlan | None:
    need = plan.need
    if plan.refusal is not None or plan.required or (need.full_cores and need.cpus):
        return None
    if any(b.bit_length() - 1 > _MAX_NUMA_ID for b in plan.candidate_bits):
        return None
    if plan.gpus and max(tables.gpu_numa, default=0) >= _MAX_GPU_BITS:
        return None
    candidates = [b.bit_length() - 1 for b in plan.candidate_bits]
    readers: list[Reader] = []
    for provider in plan.providers:
        reader = _reader(tables, layout, provider.resource, plan, candidates)
        if reader is None:
            return None
        readers.append(reader)
    numa_column = {n: i for i, n in enumerate(layout.numa_ids)}
    entries: list[_Entry] = []

    def entry(described: CandidateMask) -> _Entry:
        numa_ids = [candidates[i] for i in described.positions]
        made = _Entry(
            index=len(entries),
            mask=described.mask,
            positions=described.positions,
            distance=described.distance,
            subsets=described.subsets,
            gpu_bits=described.gpu_bits,
            any_gpu_bits=described.any_gpu_bits,
            any_gpu_count=described.any_gpu_count,
            cpu_capacity=described.cpu_capacity,
            numa_columns=tuple(numa_column[n] for n in numa_ids),
        )
        entries.append(made)
        return made

    by_width = tuple((size, tuple(entry(m) for m in masks)) for size, masks in plan.by_width)
    every = entry(plan.every) if plan.every is not None else None
    membership = np.zeros((len(entries), len(layout.numa_ids)), dtype=np.int64)
    for made in entries:
        membership[made.index, list(made.numa_columns)] = 1
    size = 1 << (max(tables.gpu_numa, default=-1) + 1) if plan.gpus else 0
    bandwidths = np.full(size, _UNKNOWN)
    return BulkPlan(
        plan=plan,
        width=layout.width,
        readers=tuple(readers),
        needs=tuple(p.resource.need for p in plan.providers),
        by_width=by_width,
        every=every,
        bandwidths=bandwidths,
        entry_widths=np.array([len(e.positions) for e in entries], dtype=np.int64),
        entry_gpu_bits=np.array([e.gpu_bits for e in entries], dtype=np.int64),
        entry_any_gpu_bits=np.array([e.any_gpu_bits for e in entries], dtype=np.int64),
        entry_any_gpu_count=np.array([e.any_gpu_count for e in entries], dtype=np.int64),
        entry_cpu_capacity=np.array([e.cpu_capacity for e in entries], dtype=np.int64),
        entry_numa=membership,
    )


def _reader(
    tables: Tables,
    layout: RowLayout,
    resource: Resource,
    plan: Plan,
    candidates: list[int],
) -> Reader | None:
    """`fast_evaluate._reader` over the row matrix: the same amounts, column-wise."""
    name = resource.name
    local = [n in resource.capacity for n in candidates]
    numa_count = len(layout.numa_ids)
    numa_column = {n: i for i, n in enumerate(layout.numa_ids)}
    need = plan.need
    if name == "CPUs":
        columns = [numa_column[n] if ok else -1 for n, ok in zip(candidates, local, strict=True)]
        return _columns_reader(columns, clip=False)
    if name == "memory":
        columns = [
            numa_count + numa_column[n] if ok else -1
            for n, ok in zip(candidates, local, strict=True)
        ]
        return _columns_reader(columns, clip=True)
    if name.startswith("hugepages-"):
        size = name.removeprefix("hugepages-")
        page_column = {key: 2 * numa_count + i for i, key in enumerate(layout.hugepages)}
        columns = [
            page_column.get((n, size), -1) if ok else -1
            for n, ok in zip(candidates, local, strict=True)
        ]
        return _columns_reader(columns, clip=True)
    if name == "GPUs":
        ours = [g for g, r in tables.gpu_resource.items() if need.gpu_resource in (None, r)]
        per_numa = [make_mask(g for g in ours if tables.gpu_numa[g] == n) for n in candidates]
        floating = make_mask(g for g in ours if tables.gpu_numa[g] is None)

        def gpus(rows: Ints) -> tuple[list[Ints], Ints]:
            free = rows[:, -1]
            return [_popcount(free & b) for b in per_numa], _popcount(free & floating)

        return gpus
    return None  # NICs


def _columns_reader(columns: list[int], *, clip: bool) -> Reader:
    def read(rows: Ints) -> tuple[list[Ints], Ints]:
        zero = np.zeros(rows.shape[0], dtype=np.int64)
        vectors = [rows[:, c] if c >= 0 else zero for c in columns]
        if clip:
            vectors = [np.maximum(v, 0) for v in vectors]
        return vectors, zero

    return read


def _popcount(values: Ints) -> Ints:
    return np.bitwise_count(values).astype(np.int64)


def decide_many(tables: Tables, bulk: BulkPlan, rows: Ints) -> Ints:
    """Per row: `decide`'s score, or REFUSED, or GENERAL (ask the general path)."""
    plan = bulk.plan
    count = rows.shape[0]
    amounts = [read(rows) for read in bulk.readers]
    needs = bulk.needs
    short = np.zeros(count, dtype=bool)
    for (vector, floating), need in zip(amounts, needs, strict=True):
        total = floating.copy()
        for column in vector:
            total += column
        short |= total < need
    gpu_free = rows[:, -1]
    gpus = plan.gpus
    cpu_at = plan.cpu_provider
    cpu_need = needs[cpu_at] if cpu_at >= 0 else 0

    def fits(entry: _Entry) -> Bools:
        ok = np.ones(count, dtype=bool)
        for (vector, floating), need in zip(amounts, needs, strict=True):
            total = floating.copy()
            for i in entry.positions:
                total += vector[i]
            ok &= total >= need
        return ok

    active = ~short
    chosen = np.full(count, -1, dtype=np.int64)
    fallback = _Best(count)
    for size, entries in bulk.by_width:
        if not active.any():
            break
        best = _Best(count)
        for entry in entries:
            ok = active & fits(entry)
            if not ok.any():
                continue
            cover = np.full(count, entry.mask, dtype=np.int64)
            for provider, (vector, floating), subsets in zip(
                plan.providers, amounts, entry.subsets, strict=True
            ):
                if not provider.narrow or provider.min_width >= size:
                    continue
                need = provider.resource.need
                part = np.zeros(count, dtype=np.int64)
                if provider.min_width == 1:
                    for i in entry.positions:
                        part |= np.where(floating + vector[i] >= need, plan.candidate_bits[i], 0)
                else:
                    for sub_mask, sub in subsets:
                        total = floating.copy()
                        for i in sub:
                            total += vector[i]
                        part |= np.where(total >= need, sub_mask, 0)
                cover &= part
            covered = cover != 0
            bandwidth = np.zeros(count)
            gpu_left = np.zeros(count, dtype=np.int64)
            if gpus:
                candidates = gpu_free & entry.gpu_bits
                found = _bandwidths(tables, bulk, candidates)
                bandwidth = np.where(found == _NO_SET, 0.0, found)
                gpu_left = _popcount(candidates) - gpus
            cpu_left = np.zeros(count, dtype=np.int64)
            if cpu_at >= 0:
                vector, _ = amounts[cpu_at]
                for i in entry.positions:
                    cpu_left += vector[i]
                cpu_left -= cpu_need
            key = (entry.distance, -bandwidth, gpu_left, cpu_left, entry.mask)
            best.offer(ok & covered, key, entry.index)
            if plan.admits_non_preferred:
                # A fallback found at a narrower width keeps wider non-preferred masks out.
                open_ = (fallback.width == 0) | (fallback.width == size)
                fallback.offer(ok & ~covered & open_, key, entry.index, width=size)
        found_best = best.index >= 0
        chosen = np.where(found_best, best.index, chosen)
        active &= ~found_best
        if size >= plan.preferred_bound:
            active &= fallback.index < 0
    chosen = np.where((chosen < 0) & ~short, fallback.index, chosen)
    every = bulk.every
    if every is not None:
        chosen = np.where((chosen < 0) & ~short & fits(every), every.index, chosen)
    return _scores(tables, bulk, rows, chosen)


class _Best:
    """Per node, the lowest (key, mask) offered so far and its entry index (-1: none)."""

    def __init__(self, count: int) -> None:
        self.index = np.full(count, -1, dtype=np.int64)
        self.width = np.zeros(count, dtype=np.int64)
        self.distance = np.zeros(count)
        self.bandwidth = np.zeros(count)  # negated, as in the key
        self.gpu_left = np.zeros(count, dtype=np.int64)
        self.cpu_left = np.zeros(count, dtype=np.int64)
        self.mask = np.zeros(count, dtype=np.int64)

    def offer(
        self,
        where: Bools,
        key: tuple[float, Floats, Ints, Ints, int],
        index: int,
        *,
        width: int = 0,
    ) -> None:
        if not where.any():
            return
        distance, bandwidth, gpu_left, cpu_left, mask = key
        # Tuple order: the first term that differs decides.
        lower = mask < self.mask
        lower = (cpu_left < self.cpu_left) | ((cpu_left == self.cpu_left) & lower)
        lower = (gpu_left < self.gpu_left) | ((gpu_left == self.gpu_left) & lower)
        lower = (bandwidth < self.bandwidth) | ((bandwidth == self.bandwidth) & lower)
        lower = (distance < self.distance) | ((distance == self.distance) & lower)
        take = where & ((self.index < 0) | lower)
        self.index[take] = index
        self.width[take] = width
        self.distance[take] = distance
        self.bandwidth[take] = bandwidth[take]
        self.gpu_left[take] = gpu_left[take]
        self.cpu_left[take] = cpu_left[take]
        self.mask[take] = mask


def _bandwidths(tables: Tables, bulk: BulkPlan, candidates: Ints) -> Floats:
    """The bandwidth of the set `choose_gpus` picks among each row's candidate GPUs."""
    table = bulk.bandwidths
    found = table[candidates]
    unknown = np.isnan(found)
    if unknown.any():
        plan = bulk.plan
        for value in np.unique(candidates[unknown]).tolist():
            if value in plan.gpu_table:  # shared with `decide`, which may have filled it
                bandwidth = plan.gpu_table[value]
            else:
                chosen = choose_gpus(
                    tables, frozenset(bits(value)), plan.gpus, plan.options.gpu_links
                )
                bandwidth = None if chosen is None else set_bandwidth(tables, chosen)
                plan.gpu_table[value] = bandwidth
            table[value] = _NO_SET if bandwidth is None else bandwidth
        found = table[candidates]
    return found


def _scores(tables: Tables, bulk: BulkPlan, rows: Ints, chosen: Ints) -> Ints:
    """`fast_evaluate._score` for each row's chosen entry: the same terms in the same order."""
    plan = bulk.plan
    decided = chosen >= 0
    if not decided.any():
        return np.full(rows.shape[0], REFUSED, dtype=np.int64)  # also: a plan with no masks
    at = np.where(decided, chosen, 0)
    gpus = plan.gpus
    span = np.minimum(1.0, plan.min_width / bulk.entry_widths[at])
    links = np.ones(rows.shape[0])
    gpu_free = rows[:, -1]
    general = np.zeros(rows.shape[0], dtype=bool)
    if gpus:
        found = _bandwidths(tables, bulk, gpu_free & bulk.entry_gpu_bits[at])
        general = decided & (found == _NO_SET)  # only `required` finds none; not here
        if gpus >= 2 and plan.best_bandwidth > 0:
            links = found / plan.best_bandwidth
    fill_sum = np.zeros(rows.shape[0])
    fill_count = np.zeros(rows.shape[0], dtype=np.int64)
    if gpus:
        capacity = bulk.entry_any_gpu_count[at]
        has = capacity > 0
        used = _popcount(bulk.entry_any_gpu_bits[at] & ~gpu_free) + gpus
        fill = np.minimum(1.0, used / np.where(has, capacity, 1))
        fill_sum = np.where(has, fill_sum + fill, fill_sum)
        fill_count += has
    cpus = plan.exclusive_cpus
    if cpus:
        capacity = bulk.entry_cpu_capacity[at]
        has = capacity > 0
        numa_count = bulk.entry_numa.shape[1]
        free_in_mask = (rows[:, :numa_count] * bulk.entry_numa[at]).sum(axis=1)
        fill = np.minimum(1.0, (capacity - free_in_mask + cpus) / np.where(has, capacity, 1))
        fill_sum = np.where(has, fill_sum + fill, fill_sum)
        fill_count += has
    pack = np.where(fill_count > 0, fill_sum / np.maximum(fill_count, 1), 1.0)
    score = _compose(span, links, pack, with_gpus=bool(gpus))
    return np.where(general, GENERAL, np.where(decided, score, REFUSED))


def _compose(span: Floats, links: Floats, pack: Floats, *, with_gpus: bool) -> Ints:
    """`scoring.compose_score` on arrays: its weights, its order of operations."""
    w_span, w_links, w_pack = _GPU_WEIGHTS if with_gpus else _CPU_WEIGHTS
    total = w_span * span + w_links * links + w_pack * pack
    rounded = np.rint(100 * total / (w_span + w_links + w_pack))  # half to even, as `round`
    return np.clip(rounded, 0, 100).astype(np.int64)


def stack(joined: bytes, width: int) -> Ints:
    """The matrix of `NodeState.free_row`s joined, `width` columns wide."""
    return np.frombuffer(joined, dtype=np.int64).reshape(-1, width)


def refusal_reason(bulk: BulkPlan, row: bytes) -> str:
    """The reason `decide` gives a node with free `row` that `decide_many` refuses."""
    matrix = stack(row, bulk.width)
    amounts = []
    for read in bulk.readers:
        vector, floating = read(matrix)
        amounts.append(([int(v[0]) for v in vector], int(floating[0])))
    return explain_amounts(bulk.plan, amounts)
