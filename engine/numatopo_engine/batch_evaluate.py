"""`fast_evaluate.decide` for many nodes of one hardware shape at once, over numpy arrays.

A scheduler asks one pod of thousands of nodes that share a handful of hardware shapes.
Per shape, each node's free amounts are one row of integers (`NodeState.free_row`),
so the rows stack into a matrix and `decide`'s search runs column-wise: per width, every
candidate NUMA mask of that width at once, feasibility, the preferred cover and the
tie-break key are (masks, nodes) array expressions, and per node the best (and
fallback) mask is the one whose key is lowest, term by term. The score is
`scoring.compose_score`'s arithmetic on arrays, term by term in the same order, so
every float is the same IEEE double (`rint` rounds half to even, as `round` does).

`bulk_plan` answers None (decide node by node) for what this module does not model:
NICs (free NICs are names, not a row column), `smt: full-cores` (whole free cores
need the CPU bitmask), `gpu-links: required` (its refusal names a pair), GPU indices
of 16 or more (the bandwidth look-up array is indexed by the free GPU bitmask) and
NUMA ids of 62 or more (masks are 64-bit columns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from numatopo_engine.fast_evaluate import CandidateMask, Plan, explain_amounts
from numatopo_engine.gpu_assignment import choose_gpus, set_bandwidth
from numatopo_engine.hints import Resource
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.numamask import bits, make_mask
from numatopo_engine.refusals import shared_pool
from numatopo_engine.scoring import _CPU_WEIGHTS, _GPU_WEIGHTS
from numatopo_engine.state import RowLayout, row_layout
from numatopo_engine.topology_tables import Tables

__all__ = [
    "GENERAL",
    "NO_SHARED_CPU",
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
# One provider's free amounts for every node: a (candidate positions, nodes) matrix, and
# the amount off-NUMA (None: nothing is).
Reader = Callable[[Ints], tuple[Ints, Ints | None]]

REFUSED = -1  # `decide` refuses the node for want of room (`fast_evaluate.refusal_reason`)
GENERAL = -2  # `decide` hands the node to the general path
# `decide` refuses the node because the pod's exclusive CPUs would leave no shared CPU
# (`refusals.shared_pool`): a reason, and a summary, of its own.
NO_SHARED_CPU = -3
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
class _Width:
    """The candidate masks of one width as arrays, one row per mask, in `decide`'s order."""

    size: int
    entries: tuple[_Entry, ...]
    indices: Ints  # entry index per row
    membership: Ints  # (masks, candidate positions) 0/1
    masks: Ints  # (masks, 1)
    distances: Floats  # (masks, 1)
    gpu_bits: Ints  # (masks, 1)
    # Providers whose preferred cover is checked per candidate position (min width 1),
    # and those checked per sub-mask (1 < min width < size).
    single_narrow: tuple[int, ...]
    subset_narrow: tuple[int, ...]
    distinct_distances: bool  # some masks differ in mean distance
    masks_ascending: bool  # row order is mask order


@dataclass(frozen=True, slots=True)
class BulkPlan:
    """A `Plan` made column-wise: readers over the row matrix and per-entry arrays."""

    plan: Plan
    width: int  # of a row
    readers: tuple[Reader, ...]
    needs: tuple[int, ...]
    candidate_bits: Ints  # 1 << NUMA id, by candidate position
    by_width: tuple[_Width, ...]
    every: _Entry | None
    bandwidths: Floats  # by free candidate GPU bitmask; empty when no GPUs are asked
    # Per entry index, for the score of the chosen one.
    entry_span: Floats  # the score's span term
    entry_gpu_bits: Ints
    entry_any_gpu_bits: Ints
    entry_any_gpu_count: Ints
    entry_cpu_capacity: Ints
    entry_numa: Ints  # (entries, NUMA nodes) 0/1: which CPU columns the mask holds
    # Whether the score's GPU and CPU fill terms count on every entry (1), on none (0),
    # or only where the entry's capacity is not zero (-1).
    gpu_fill: int
    cpu_fill: int


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

    by_width = tuple(
        _width(plan, size, tuple(entry(m) for m in masks), len(candidates))
        for size, masks in plan.by_width
    )
    every = entry(plan.every) if plan.every is not None else None
    membership = np.zeros((len(entries), len(layout.numa_ids)), dtype=np.int64)
    for made in entries:
        membership[made.index, list(made.numa_columns)] = 1
    size = 1 << (max(tables.gpu_numa, default=-1) + 1) if plan.gpus else 0
    widths = np.array([len(e.positions) for e in entries], dtype=np.int64)
    bandwidths = np.full(size, _UNKNOWN)
    return BulkPlan(
        plan=plan,
        width=layout.width,
        readers=tuple(readers),
        needs=tuple(p.resource.need for p in plan.providers),
        candidate_bits=np.array(plan.candidate_bits, dtype=np.int64),
        by_width=by_width,
        every=every,
        bandwidths=bandwidths,
        entry_span=np.minimum(1.0, plan.min_width / widths),
        entry_gpu_bits=np.array([e.gpu_bits for e in entries], dtype=np.int64),
        entry_any_gpu_bits=np.array([e.any_gpu_bits for e in entries], dtype=np.int64),
        entry_any_gpu_count=np.array([e.any_gpu_count for e in entries], dtype=np.int64),
        entry_cpu_capacity=np.array([e.cpu_capacity for e in entries], dtype=np.int64),
        entry_numa=membership,
        gpu_fill=_uniform(bool(plan.gpus and e.any_gpu_count) for e in entries),
        cpu_fill=_uniform(bool(plan.exclusive_cpus and e.cpu_capacity) for e in entries),
    )


def _uniform(flags: Iterable[bool]) -> int:
    seen = set(flags)
    return int(seen.pop()) if len(seen) == 1 else -1


def _width(plan: Plan, size: int, entries: tuple[_Entry, ...], positions: int) -> _Width:
    membership = np.zeros((len(entries), positions), dtype=np.int64)
    for row, made in enumerate(entries):
        membership[row, list(made.positions)] = 1
    narrow = [i for i, p in enumerate(plan.providers) if p.narrow and p.min_width < size]
    return _Width(
        size=size,
        entries=entries,
        indices=np.array([e.index for e in entries], dtype=np.int64),
        membership=membership,
        masks=np.array([[e.mask] for e in entries], dtype=np.int64),
        distances=np.array([[e.distance] for e in entries], dtype=np.float64),
        gpu_bits=np.array([[e.gpu_bits] for e in entries], dtype=np.int64),
        single_narrow=tuple(i for i in narrow if plan.providers[i].min_width == 1),
        subset_narrow=tuple(i for i in narrow if plan.providers[i].min_width > 1),
        distinct_distances=len({e.distance for e in entries}) > 1,
        masks_ascending=all(a.mask < b.mask for a, b in pairwise(entries)),
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
        per_numa = np.array(
            [[make_mask(g for g in ours if tables.gpu_numa[g] == n)] for n in candidates],
            dtype=np.int64,
        )
        floating = make_mask(g for g in ours if tables.gpu_numa[g] is None)

        def gpus(rows: Ints) -> tuple[Ints, Ints | None]:
            free = rows[:, -1]
            return _popcount(free & per_numa), _popcount(free & floating) if floating else None

        return gpus
    return None  # NICs


def _columns_reader(columns: list[int], *, clip: bool) -> Reader:
    take = [max(c, 0) for c in columns]
    present = np.array([[c >= 0] for c in columns], dtype=np.int64)
    missing = min(columns) < 0

    def read(rows: Ints) -> tuple[Ints, Ints | None]:
        matrix = rows[:, take].T
        if missing:
            matrix = matrix * present
        return (np.maximum(matrix, 0) if clip else matrix), None

    return read


def _plus(amounts: Ints, floating: Ints | None) -> Ints:
    return amounts if floating is None else amounts + floating


def _popcount(values: Ints) -> Ints:
    return np.bitwise_count(values).astype(np.int64)


def decide_many(tables: Tables, bulk: BulkPlan, rows: Ints) -> Ints:
    """Per row: `decide`'s score, or REFUSED, NO_SHARED_CPU, or GENERAL (ask the general path).

    Every mask of one width is weighed at once, as a (masks, nodes) matrix; per node the
    mask with the lowest key wins, the key's terms compared one after the other as
    `decide` compares its tuples (masks differ, so exactly one mask is lowest).
    """
    plan = bulk.plan
    count = rows.shape[0]
    amounts = [read(rows) for read in bulk.readers]
    matrices = [matrix for matrix, _ in amounts]
    floats = [floating for _, floating in amounts]
    needs = bulk.needs
    gpu_free = rows[:, -1]
    singles: dict[tuple[int, ...], Ints] = {}

    def single_cover(providers: tuple[int, ...]) -> Ints:
        """Per node, the candidate bits where each of `providers` fits on that NUMA node
        alone: the preferred cover of a min-width-1 provider, for any mask."""
        cover = singles.get(providers)
        if cover is None:
            fit = np.ones(matrices[0].shape, dtype=bool)
            for i in providers:
                fit &= _plus(matrices[i], floats[i]) >= needs[i]
            cover = singles[providers] = bulk.candidate_bits @ fit.astype(np.int64)
        return cover

    # Amounts are never negative, so a node short of some resource over all candidates
    # fits no mask: it stays unchosen without a test of its own.
    active = np.ones(count, dtype=bool)
    no_shared = _no_shared_cpu(bulk, rows, matrices, floats)
    if no_shared is not None:
        active &= ~no_shared
    chosen = np.full(count, -1, dtype=np.int64)
    fallback = np.full(count, -1, dtype=np.int64)
    for width in bulk.by_width:
        if not active.any():
            break
        ok = np.broadcast_to(active, (len(width.entries), count))
        for matrix, floating, need in zip(matrices, floats, needs, strict=True):
            ok = ok & (_plus(width.membership @ matrix, floating) >= need)
        cover: Ints = width.masks
        if width.single_narrow:
            cover = cover & single_cover(width.single_narrow)
        if width.subset_narrow:
            cover = np.array(np.broadcast_to(cover, ok.shape))
            for row, entry in enumerate(width.entries):
                cover[row] &= _subset_cover(plan, entry, width, matrices, floats)
        covered = cover != 0
        terms = _terms(tables, bulk, width, gpu_free, matrices) if len(width.entries) > 1 else []
        found_best, pick = _lowest(ok & covered, terms)
        chosen = np.where(found_best, width.indices[pick], chosen)
        if plan.admits_non_preferred:
            # A fallback found at a narrower width keeps wider non-preferred masks out.
            found_fallback, pick = _lowest(ok & ~covered & (fallback < 0), terms)
            fallback = np.where(found_fallback, width.indices[pick], fallback)
        active &= ~found_best
        if width.size >= plan.preferred_bound:
            active &= fallback < 0
    chosen = np.where(chosen < 0, fallback, chosen)
    every = bulk.every
    if every is not None:
        fits = np.ones(count, dtype=bool)
        for matrix, floating, need in zip(matrices, floats, needs, strict=True):
            fits &= _plus(matrix[list(every.positions)].sum(axis=0), floating) >= need
        chosen = np.where((chosen < 0) & fits, every.index, chosen)
    scores = _scores(tables, bulk, rows, chosen)
    return scores if no_shared is None else np.where(no_shared, NO_SHARED_CPU, scores)


def _no_shared_cpu(
    bulk: BulkPlan, rows: Ints, matrices: list[Ints], floats: list[Ints | None]
) -> Bools | None:
    """Per row, whether `decide` refuses it for its last shared CPU: no provider is short
    over every candidate (that refusal comes first), yet the pod's exclusive CPUs would
    take every free allocatable CPU of a node that must keep one. None: no row can be."""
    plan = bulk.plan
    if not (plan.exclusive_cpus and plan.shared_floor):
        return None
    # The row's first columns are the free allocatable CPUs of every NUMA node.
    free_cpus = rows[:, : bulk.entry_numa.shape[1]].sum(axis=1)
    refused: Bools = free_cpus - plan.exclusive_cpus < plan.shared_floor
    for matrix, floating, need in zip(matrices, floats, bulk.needs, strict=True):
        refused &= _plus(matrix.sum(axis=0), floating) >= need
    return refused


def _terms(
    tables: Tables, bulk: BulkPlan, width: _Width, gpu_free: Ints, matrices: list[Ints]
) -> list[Ints | Floats]:
    """`decide`'s tie-break key per (mask, node), less what cannot change the winner:
    terms equal on every mask, constants subtracted from every mask, and the mask itself
    when rows are already in mask order."""
    plan = bulk.plan
    terms: list[Ints | Floats] = [width.distances] if width.distinct_distances else []
    if plan.gpus:
        candidates = gpu_free & width.gpu_bits
        found = _bandwidths(tables, bulk, candidates)
        terms.append(-np.where(found == _NO_SET, 0.0, found))
        terms.append(np.bitwise_count(candidates))  # GPUs left: less the pod's GPUs
    if plan.cpu_provider >= 0:
        terms.append(width.membership @ matrices[plan.cpu_provider])  # less the pod's CPUs
    if not width.masks_ascending:
        terms.append(width.masks)
    return terms


def _subset_cover(
    plan: Plan,
    entry: _Entry,
    width: _Width,
    matrices: list[Ints],
    floats: list[Ints | None],
) -> Ints:
    """The bits of `entry`'s preferred sub-masks where each min-width-2+ provider fits."""
    cover = np.full(matrices[0].shape[1], entry.mask, dtype=np.int64)
    for i in width.subset_narrow:
        need = plan.providers[i].resource.need
        part = np.zeros_like(cover)
        for sub_mask, sub in entry.subsets[i]:
            total = _plus(matrices[i][list(sub)].sum(axis=0), floats[i])
            part |= np.where(total >= need, sub_mask, 0)
        cover &= part
    return cover


def _lowest(valid: Bools, terms: list[Ints | Floats]) -> tuple[Bools, Ints]:
    """Per node (column): whether any row is valid, and the first valid row among those
    whose terms are lowest, compared in order (the first term that differs decides).
    Overwrites `valid`, which callers build for it."""
    if valid.shape[0] == 1:
        return valid[0], np.zeros(valid.shape[1], dtype=np.int64)
    for term in terms:
        low = np.where(valid, term, _FLOAT_TOP if term.dtype.kind == "f" else _INT_TOP)
        valid &= term == low.min(axis=0)
    found: Bools = np.logical_or.reduce(valid, axis=0)
    row: Ints = valid.argmax(axis=0)
    return found, row


_FLOAT_TOP = np.inf
_INT_TOP = np.int64(np.iinfo(np.int64).max)


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
    span = bulk.entry_span[at]
    links = np.ones(rows.shape[0])
    gpu_free = rows[:, -1]
    general = None
    fill_sum: Floats | float = 0.0
    fill_count: Ints | int = 0
    if gpus:
        found = _bandwidths(tables, bulk, gpu_free & bulk.entry_gpu_bits[at])
        general = decided & (found == _NO_SET)  # only `required` finds none; not here
        if gpus >= 2 and plan.best_bandwidth > 0:
            links = found / plan.best_bandwidth
        capacity = bulk.entry_any_gpu_count[at]
        used = _popcount(bulk.entry_any_gpu_bits[at] & ~gpu_free) + gpus
        fill_sum, fill_count = _add_fill(fill_sum, fill_count, used, capacity, bulk.gpu_fill)
    cpus = plan.exclusive_cpus
    if cpus:
        capacity = bulk.entry_cpu_capacity[at]
        numa_count = bulk.entry_numa.shape[1]
        free_in_mask = (rows[:, :numa_count] * bulk.entry_numa[at]).sum(axis=1)
        used = capacity - free_in_mask + cpus
        fill_sum, fill_count = _add_fill(fill_sum, fill_count, used, capacity, bulk.cpu_fill)
    if isinstance(fill_count, int):
        # The same count of fills on every mask: none leaves the pack term at 1.
        pack = fill_sum / fill_count if fill_count else np.ones(rows.shape[0])
    else:
        pack = np.where(fill_count > 0, fill_sum / np.maximum(fill_count, 1), 1.0)
    score = _compose(span, links, np.asarray(pack, dtype=np.float64), with_gpus=bool(gpus))
    if general is not None:
        score = np.where(general, GENERAL, score)
    return np.where(decided, score, REFUSED)


def _add_fill(
    fill_sum: Floats | float,
    fill_count: Ints | int,
    used: Ints,
    capacity: Ints,
    counted: int,
) -> tuple[Floats | float, Ints | int]:
    """`scoring`'s fill term added where the mask has capacity (`counted`: as `gpu_fill`)."""
    if counted == 0:
        return fill_sum, fill_count
    if counted == 1:
        return fill_sum + np.minimum(1.0, used / capacity), fill_count + 1
    has = capacity > 0
    fill = np.minimum(1.0, used / np.where(has, capacity, 1))
    return np.where(has, fill_sum + fill, fill_sum), fill_count + has


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
    """The reason `decide` gives a node with free `row` that `decide_many` refuses
    (REFUSED or NO_SHARED_CPU)."""
    matrix = stack(row, bulk.width)
    amounts = []
    for read in bulk.readers:
        vector, floating = read(matrix)
        amounts.append(([int(v[0]) for v in vector], 0 if floating is None else int(floating[0])))
    plan = bulk.plan
    short = any(
        sum(v) + f < p.resource.need for (v, f), p in zip(amounts, plan.providers, strict=True)
    )
    if not short and plan.exclusive_cpus and plan.shared_floor:
        free_cpus = int(matrix[0, : bulk.entry_numa.shape[1]].sum())
        if free_cpus - plan.exclusive_cpus < plan.shared_floor:
            return shared_pool(plan.exclusive_cpus, free_cpus)
    return explain_amounts(plan, amounts)
