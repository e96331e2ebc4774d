"""The one decision path: where a placement unit goes on each of many nodes of one shape.

Every caller reaches `decide_rows`; one node is one row. docs/DESIGN.md ("The allocation engine")
states the rules; per node, as (nodes x masks) array expressions:

1. Hint providers as the kubelet's (`hints` for the inputs); `smt: full-cores` counts only wholly
   free whole cores, `cpu: numa` hints over the shared CPUs. A memory provider with no hint at all
   states no preference, and refuses when it allocates; its hints count memory the pod's init
   containers left on exactly that mask (`reusing_memory`).
2. The Topology Manager's merge and admission (`topology_manager`, same answers). Under `none` CPUs
   and devices are still placed aligned where they can be.
3. The memory manager's own nodes: the merged mask if its free memory holds the request, else its
   best hint containing the mask (under `none`, which hands it no hint: its own best hint, as the
   kubelet books it); refused when there is none, when that hint is not preferred while the merged
   one is, or when a multi-node mask mixes memory groups.
4. numatopo's checks beyond the kubelet (`max-numa-nodes`, `gpu-links: required`, the last shared
   CPU), then the node score (`scoring`).

The GPU set and the non-preferred merge run per node, for the nodes that need them. Masks are every
subset of up to `FULL_SEARCH` NUMA nodes; larger machines (where the kubelet's Topology Manager
refuses to run) are searched over the NUMA nodes holding something asked for, by increasing width
within a budget, and there a non-preferred placement is the narrowest mask that holds it all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from math import comb
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from numatopo_engine.annotations import CpuMode, GpuLinksMode, PolicyName
from numatopo_engine.cpu_assignment import free_whole_core_cpus
from numatopo_engine.gpu_assignment import GpuMemo, choose_gpus, first_unlinked_pair, set_bandwidth
from numatopo_engine.hints import Need, RowLayout
from numatopo_engine.numamask import LOCAL_DISTANCE, bits
from numatopo_engine.packing import (
    Hosts,
    WorkloadMix,
    node_rank,
    pack_of_growth,
    stranded,
    usable_gpus,
)
from numatopo_engine.refusals import Kind, Shortfall, Wanted
from numatopo_engine.request import TopologyOptions
from numatopo_engine.resources import accelerator_word
from numatopo_engine.scoring import CPU_WEIGHTS, GPU_WEIGHTS
from numatopo_engine.topology_manager import best_non_preferred
from numatopo_engine.topology_tables import Tables

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

FULL_SEARCH = 10  # NUMA nodes up to which every mask is a candidate (1023 masks)
MASK_BUDGET = 4096  # masks per width on larger machines, best-equipped nodes first
DEFAULT_MAX_WIDTH = 8  # widest mask searched on larger machines (the kubelet's node cap)
_BIG = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, slots=True)
class _Provider:
    wanted: tuple[Wanted, ...]
    columns: tuple[Ints, ...]  # per wanted: (NUMA positions, k) row columns, summed
    narrowest: int  # the kubelet's minAffinitySize
    pref: Bools  # per mask: preferred (width == narrowest)
    holds: Bools  # per mask: the hardware holds it (memory: every size; else all True)
    memory: bool
    # Memory only, per wanted: bytes per mask reusable on exactly that mask (`reusing_memory`).
    reuse: tuple[Ints, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything about one unit's request on one hardware shape that no node changes."""

    tables: Tables
    layout: RowLayout
    need: Need
    options: TopologyOptions
    wanted: tuple[Wanted, ...]
    ids: tuple[int, ...]  # NUMA id per position
    masks: tuple[int, ...]  # candidate masks, bit p = NUMA position p
    full: bool  # masks are every subset of the positions
    counts: Ints
    member: Ints  # (masks, positions) 0/1
    rank: Ints  # the kubelet's order of masks (narrowest, or closest), 0 = best
    narrow_rank: Ints  # by width, then value (the memory manager's order)
    every: int  # the default mask (all positions of the space)
    providers: tuple[_Provider, ...]
    totals: tuple[tuple[str, int, Ints], ...]  # (resource, need, row columns) node-wide
    free: FreeColumns  # the rank's fragmentation columns; `free.cpu`: free plain CPUs
    floor: int
    narrowest: int  # the score's span numerator
    cpu_capacity: Ints  # per mask: allocatable CPUs
    gpu_in_mask: tuple[int, ...]  # per mask: bitmask of GPUs of the resource in it
    gpu_all_in_mask: Ints  # per mask: GPUs (any resource) in it or on no NUMA node
    gpu_matching: int  # bitmask of the GPUs of the requested resource
    position_of: dict[int, int]
    position_gpu_bits: Ints  # per NUMA position: bitmask of its GPUs (0 past 63 GPUs)


def make_plan(
    tables: Tables,
    layout: RowLayout,
    need: Need,
    options: TopologyOptions,
    *,
    floor: int,
    prefer_closest: bool,
) -> Plan:
    ids = layout.numa_ids
    position_of = {n: p for p, n in enumerate(ids)}
    full = len(ids) <= FULL_SEARCH
    if full:
        masks = list(range(1, 1 << len(ids)))
        every = masks[-1]
    else:
        masks, every = _bounded_masks(tables, need, options, ids)
    member = np.array(
        [[m >> p & 1 for p in range(len(ids))] for m in masks], dtype=np.int64
    ).reshape(len(masks), len(ids))
    counts = member.sum(axis=1)
    closest = prefer_closest and options.policy is not PolicyName.SINGLE_NUMA_NODE
    distance = _mean_distances(tables, ids, member) if closest else np.zeros(len(masks))
    by_value = np.array(masks, dtype=np.int64) if len(ids) < 63 else np.arange(len(masks))
    # A permutation's argsort is its inverse: each mask's place in the order.
    rank = np.argsort(np.lexsort((by_value, distance, counts))).astype(np.int64)
    narrow_rank = np.argsort(np.lexsort((np.arange(len(masks)), counts))).astype(np.int64)
    providers = _providers(tables, layout, need, member, counts)
    gpu_matching, gpu_in_mask, gpu_all = _gpus_in_masks(tables, need, ids, masks)
    allocatable = np.array([len(tables.numa_allocatable[n]) for n in ids], dtype=np.int64)
    free = free_columns(tables, layout)
    gpu_bits = [
        sum(1 << g for g, n in tables.gpu_numa.items() if n == numa and g < 63) for numa in ids
    ]
    return Plan(
        tables=tables,
        layout=layout,
        need=need,
        options=options,
        wanted=wanted_of(need),
        ids=ids,
        masks=tuple(masks),
        full=full,
        counts=counts,
        member=member,
        rank=rank,
        narrow_rank=narrow_rank,
        every=every,
        providers=providers,
        totals=_totals(layout, need),
        free=free,
        floor=floor,
        narrowest=max((p.narrowest for p in providers), default=1),
        cpu_capacity=member @ allocatable,
        gpu_in_mask=tuple(gpu_in_mask),
        gpu_all_in_mask=np.array(gpu_all, dtype=np.int64),
        gpu_matching=gpu_matching,
        position_of=position_of,
        position_gpu_bits=np.array(gpu_bits, dtype=np.int64),
    )


def _gpus_in_masks(
    tables: Tables, need: Need, ids: tuple[int, ...], masks: list[int]
) -> tuple[int, list[int], list[int]]:
    """The bitmask of the GPUs of the requested resource; per mask, the bitmask of those in it, and
    how many GPUs (any resource) are in it or on no NUMA node."""
    matching = sum(1 << g for g, r in tables.gpu_resource.items() if need.gpu_resource in (None, r))
    in_mask: list[int] = []
    every: list[int] = []
    for m in masks:
        inside = {ids[p] for p in range(len(ids)) if m >> p & 1}
        held = [g for g, numa in tables.gpu_numa.items() if numa is None or numa in inside]
        in_mask.append(sum(1 << g for g in held if matching >> g & 1))
        every.append(len(held))
    return matching, in_mask, every


@dataclass(frozen=True, slots=True)
class FreeColumns:
    """Where a row holds each NUMA position's free exclusive CPUs and whole GPUs (the rank's)."""

    cpu: Ints  # per position: the row column of its free plain CPUs
    gpu_count: Ints  # row columns of free GPU counts (any resource, on a NUMA node)
    gpu_onehot: Ints  # (those columns x positions) 0/1: the column's NUMA position
    numa_gpu_capacity: int  # the most GPUs one NUMA node of the hardware holds
    numa_cpu_capacity: int  # the most allocatable CPUs one NUMA node holds

    def per_numa(self, rows: Ints) -> tuple[Ints, Ints]:
        """(rows x positions) free whole GPUs and free plain CPUs."""
        return rows[:, self.gpu_count] @ self.gpu_onehot, rows[:, self.cpu]


def free_columns(tables: Tables, layout: RowLayout) -> FreeColumns:
    ids = layout.numa_ids
    located = [(i, n) for i, (n, _) in enumerate(layout.gpu_keys) if n is not None]
    onehot = [[int(n == numa) for numa in ids] for _, n in located]
    per_numa = Counter(n for n in tables.gpu_numa.values() if n is not None)
    return FreeColumns(
        cpu=np.array([layout.cpu(p) for p in range(len(ids))], dtype=np.int64),
        gpu_count=np.array([layout.gpu(i) for i, _ in located], dtype=np.int64),
        gpu_onehot=np.array(onehot, dtype=np.int64).reshape(len(located), len(ids)),
        numa_gpu_capacity=max(per_numa.values(), default=0),
        numa_cpu_capacity=max((len(tables.numa_allocatable[n]) for n in ids), default=0),
    )


def wanted_of(need: Need) -> tuple[Wanted, ...]:
    """What `need` asks, resource by resource, as refusals word it."""
    out: list[Wanted] = []
    if need.cpus and need.cpu_mode is not CpuMode.NONE:
        out.append(Wanted("CPUs", need.cpus))
    if need.memory_bytes:
        out.append(Wanted("memory", need.memory_bytes, in_bytes=True))
    out.extend(Wanted(f"hugepages-{s}", a, in_bytes=True) for s, a in need.hugepages if a)
    if need.gpus:
        out.append(Wanted(accelerator_word(need.gpu_resource), need.gpus))
    if need.nics:
        out.append(Wanted("NICs", need.nics))
    return tuple(out)


def _matching_keys(
    keys: tuple[tuple[int | None, str], ...], resource: str | None
) -> list[tuple[int, int | None]]:
    return [(i, n) for i, (n, r) in enumerate(keys) if resource in (None, r)]


def _totals(layout: RowLayout, need: Need) -> tuple[tuple[str, int, Ints], ...]:
    out: list[tuple[str, int, list[int]]] = []
    if need.cpus and need.cpu_mode is not CpuMode.NONE:
        column = layout.whole if need.full_cores else layout.cpu
        out.append(("CPUs", need.cpus, [column(p) for p in range(layout.n)]))
    if need.memory_bytes:
        out.append(("memory", need.memory_bytes, [layout.memory(p) for p in range(layout.n)]))
    for size, amount in need.hugepages:
        if amount:
            picked = [layout.hugepage(i) for i, (_, s) in enumerate(layout.hugepages) if s == size]
            out.append((f"hugepages-{size}", amount, picked))
    if need.gpus:
        picked = [layout.gpu(i) for i, _ in _matching_keys(layout.gpu_keys, need.gpu_resource)]
        out.append((accelerator_word(need.gpu_resource), need.gpus, picked))
    if need.nics:
        picked = [layout.nic(i) for i, _ in _matching_keys(layout.nic_keys, need.nic_resource)]
        out.append(("NICs", need.nics, picked))
    return tuple((name, asked, np.asarray(cols, dtype=np.int64)) for name, asked, cols in out)


def _candidate_positions(tables: Tables, need: Need, ids: tuple[int, ...]) -> list[int]:
    found: set[int] = set()
    if need.cpus and need.cpu_mode is not CpuMode.NONE:
        found.update(n for n, c in tables.cpu_capacity.items() if c)
    if need.has_memory:
        found.update(n for n, c in tables.memory_capacity.items() if c)
        found.update(n for (n, _), c in tables.numa_hugepages.items() if c)
    if need.gpus:
        found.update(n for n in tables.gpu_numa.values() if n is not None)
    if need.nics:
        found.update(n for n in tables.nic_numa.values() if n is not None)
    return [p for p, n in enumerate(ids) if n in found]


def _bounded_masks(
    tables: Tables, need: Need, options: TopologyOptions, ids: tuple[int, ...]
) -> tuple[list[int], int]:
    """Masks up to the width bound over the positions of the NUMA nodes holding something asked
    for (best-equipped first), and all of them."""
    positions = _candidate_positions(tables, need, ids)
    width = options.max_numa_nodes or DEFAULT_MAX_WIDTH
    if options.policy is PolicyName.SINGLE_NUMA_NODE:
        width = 1

    def equipped(position: int) -> tuple[float, int]:
        numa = ids[position]
        gpus = sum(1 for n in tables.gpu_numa.values() if n == numa)
        cpus = tables.cpu_capacity.get(numa, 0)
        return (-(gpus * 1000 + cpus + tables.memory_capacity.get(numa, 0) / 2**40), position)

    # No mask narrower than a resource's hardware minimum can hold it, and a placement wider than
    # one past the widest minimum is never worth searching here.
    widest = 1
    for asked, amounts in _hardware_amounts(tables, need, [ids[p] for p in positions]):
        held, used = 0, 0
        for amount in sorted(amounts, reverse=True):
            if held >= asked:
                break
            held, used = held + amount, used + 1
        widest = max(widest, used)
    width = min(width, widest + 1)
    masks: list[int] = []
    for size in range(1, min(width, len(positions)) + 1):
        pool = positions
        if comb(len(positions), size) > MASK_BUDGET:
            keep = size
            while comb(keep + 1, size) <= MASK_BUDGET:
                keep += 1
            pool = sorted(sorted(positions, key=equipped)[:keep])
        masks.extend(sum(1 << p for p in c) for c in combinations(pool, size))
    every = sum(1 << p for p in positions) if positions else 1
    if every not in masks:
        masks.append(every)
    return masks, every


def _hardware_amounts(tables: Tables, need: Need, numa: list[int]) -> list[tuple[int, list[int]]]:
    """(asked, capacity per NUMA node of `numa`) for each NUMA-bound resource."""
    out: list[tuple[int, list[int]]] = []
    if need.cpus and need.cpu_mode is not CpuMode.NONE:
        out.append((need.cpus, [tables.numa_online.get(n, 0) for n in numa]))
    if need.memory_bytes:
        out.append((need.memory_bytes, [tables.memory_capacity.get(n, 0) for n in numa]))
    if need.gpus:
        out.append((need.gpus, [sum(1 for g in tables.gpu_numa.values() if g == n) for n in numa]))
    if need.nics:
        out.append((need.nics, [sum(1 for x in tables.nic_numa.values() if x == n) for n in numa]))
    return out


def _mean_distances(tables: Tables, ids: tuple[int, ...], member: Ints) -> npt.NDArray[np.float64]:
    """Mean SLIT distance over all ordered pairs of a mask's nodes, self-pairs too (the kubelet's
    `CalculateAverageFor`)."""
    matrix = np.array(
        [[tables.distances.get((a, b), LOCAL_DISTANCE) for b in ids] for a in ids], dtype=np.float64
    ).reshape(len(ids), len(ids))
    weights = member.astype(np.float64)
    totals = np.einsum("ma,ab,mb->m", weights, matrix, weights)
    counts = weights.sum(axis=1)
    return np.asarray(totals / (counts * counts), dtype=np.float64)


def _providers(
    tables: Tables, layout: RowLayout, need: Need, member: Ints, counts: Ints
) -> tuple[_Provider, ...]:
    ids = layout.numa_ids
    everything = np.ones(len(counts), dtype=bool)

    def make(
        wanted: tuple[Wanted, ...], columns: list[Ints], capacities: list[dict[int, int]],
        *, memory: bool = False,
    ) -> _Provider:  # fmt: skip
        holds = everything.copy()
        for w, capacity in zip(wanted, capacities, strict=True):
            holds &= (member @ np.array([capacity.get(n, 0) for n in ids], np.int64)) >= w.amount
        narrowest = int(counts[holds].min()) if holds.any() else len(ids)
        return _Provider(
            wanted, tuple(columns), narrowest, counts == narrowest,
            holds if memory else everything, memory,
        )  # fmt: skip

    providers: list[_Provider] = []
    cpu = _cpu_hint_inputs(tables, layout, need)
    if cpu is not None:
        providers.append(make((Wanted("CPUs", need.cpus),), [cpu[0]], [cpu[1]]))
    if need.has_memory:
        providers.append(make(*_memory_hint_inputs(tables, layout, need), memory=True))
    for wanted, columns, located in _device_hint_inputs(tables, layout, need):
        providers.append(make((wanted,), [columns], [located]))
    return tuple(providers)


def _cpu_hint_inputs(
    tables: Tables, layout: RowLayout, need: Need
) -> tuple[Ints, dict[int, int]] | None:
    """The CPU provider's row columns per position and its capacity per NUMA id."""
    positions = range(len(layout.numa_ids))
    if need.exclusive_cpus and need.full_cores:
        # Whole cores of the hardware: as if every CPU were free.
        cores = free_whole_core_cpus(tables, set(tables.cpu_numa), layout.numa_ids)
        capacity = Counter(tables.cpu_numa[c] for c in cores)
        return np.array([layout.whole(p) for p in positions], dtype=np.int64), capacity
    columns = np.array([layout.cpu(p) for p in positions], dtype=np.int64)
    if need.exclusive_cpus:
        return columns, dict(tables.numa_online)
    if need.cpus and need.cpu_mode is CpuMode.NUMA:
        # numatopo's own: fractional CPUs on the shared CPUs of the chosen NUMA nodes (the kubelet
        # gives no CPU hint for them, and pins them nowhere).
        return columns, {n: len(c) for n, c in tables.numa_allocatable.items()}
    return None


def _memory_hint_inputs(
    tables: Tables, layout: RowLayout, need: Need
) -> tuple[tuple[Wanted, ...], list[Ints], list[dict[int, int]]]:
    """The memory provider's wanted sizes, row columns and capacities (memory, huge pages)."""
    ids = layout.numa_ids
    wanted: list[Wanted] = []
    columns: list[Ints] = []
    capacities: list[dict[int, int]] = []
    if need.memory_bytes:
        wanted.append(Wanted("memory", need.memory_bytes, in_bytes=True))
        columns.append(np.array([layout.memory(p) for p in range(len(ids))], dtype=np.int64))
        capacities.append(dict(tables.memory_capacity))
    for size, amount in need.hugepages:
        if not amount:
            continue
        wanted.append(Wanted(f"hugepages-{size}", amount, in_bytes=True))
        index = {n: i for i, (n, s) in enumerate(layout.hugepages) if s == size}
        columns.append(np.array(
            [layout.hugepage(index[n]) if n in index else layout.zero for n in ids],
            dtype=np.int64,
        ))  # fmt: skip
        capacities.append({n: v for (n, s), v in tables.numa_hugepages.items() if s == size})
    return tuple(wanted), columns, capacities


def _device_hint_inputs(
    tables: Tables, layout: RowLayout, need: Need
) -> list[tuple[Wanted, Ints, dict[int, int]]]:
    """Per device kind asked (GPUs, NICs) whose devices have a NUMA node (else it gives no
    preference): wanted, (positions x names) row columns, devices per NUMA id."""
    ids = layout.numa_ids
    gpu_places = [(n, tables.gpu_resource[g]) for g, n in tables.gpu_numa.items()]
    nic_places = [(n, tables.nic_resource[x]) for x, n in tables.nic_numa.items()]
    out: list[tuple[Wanted, Ints, dict[int, int]]] = []
    for count, resource, keys, places, column, name in (
        (need.gpus, need.gpu_resource, layout.gpu_keys, gpu_places, layout.gpu,
         accelerator_word(need.gpu_resource)),
        (need.nics, need.nic_resource, layout.nic_keys, nic_places, layout.nic, "NICs"),
    ):  # fmt: skip
        if not count:
            continue
        located = Counter(p for p, kind in places if p is not None and resource in (None, kind))
        if not located:
            continue
        by_numa = [[column(i) for i, k in _matching_keys(keys, resource) if k == n] for n in ids]
        # A request naming no resource counts every name of the kind, one column each, summed.
        depth = max(len(c) for c in by_numa)
        columns = np.array(
            [c + [layout.zero] * (depth - len(c)) for c in by_numa], dtype=np.int64
        ).reshape(len(ids), depth)
        out.append((Wanted(name, count), columns, located))
    return out


@dataclass(slots=True)
class Decided:
    """`decide_rows`' answers per row: `score` (-1 refused), `kind` of refusal (None admitted), and
    for admitted rows the merged and memory masks (plan indices; `mask(i)`, `memory_mask(i)` give
    the NUMA bits) and the GPUs."""

    plan: Plan
    score: Ints
    kind: list[Kind | None]
    chosen: Ints
    memory_index: Ints
    gpus: list[tuple[int, ...]]
    pair: list[tuple[int, int] | None]
    short: Ints  # SHORT rows: the index of the first resource short in `plan.totals`
    terms: RankTerms  # the node rank's row terms (`node_ranks`); meaningless where refused
    # The Topology Manager's merged hint is preferred (the memory manager reads it); `none`
    # merges no hint.
    preferred: Bools

    def mask(self, row: int) -> int:
        return _to_ids(self.plan.masks[int(self.chosen[row])], self.plan.ids)

    def memory_mask(self, row: int) -> int:
        return _to_ids(self.plan.masks[int(self.memory_index[row])], self.plan.ids)


def decide_rows(
    plan: Plan,
    rows: Ints,
    memo: GpuMemo,
    mix: WorkloadMix | None = None,
    *,
    unit_memory: bool = True,
) -> Decided:
    """Decide `plan`'s unit on every row (node) of `rows`, each from that row, the plan and `mix`
    alone; `unit_memory=False` skips step 3 (the caller asks memory container by container)."""
    count = rows.shape[0]
    kind: list[Kind | None] = [None] * count
    refused = np.zeros(count, dtype=bool)

    def refuse(where: Bools, why: Kind) -> None:
        for i in np.flatnonzero(where & ~refused).tolist():
            kind[i] = why
        refused[where] = True

    short = np.full(count, -1, dtype=np.int64)  # the first resource short, by index
    for position, (_, asked, columns) in enumerate(plan.totals):
        lacking = (rows[:, columns].sum(axis=1) < asked) & ~refused
        short[lacking] = position
        refuse(lacking, Kind.SHORT)
    exclusive = plan.need.exclusive_cpus
    if exclusive:
        free_cpus = rows[:, plan.free.cpu].sum(axis=1)
        refuse(free_cpus - exclusive < plan.floor, Kind.SHARED_POOL)
    sat, memory = _hints(plan, rows)
    preferred_any = _preferred_anywhere(plan, sat, count)
    has_preferred: Bools = np.asarray(preferred_any.any(axis=1), dtype=bool)
    chosen = np.argmin(np.where(preferred_any, plan.rank, _BIG), axis=1)
    if plan.options.policy in (PolicyName.RESTRICTED, PolicyName.SINGLE_NUMA_NODE):
        refuse(~has_preferred, Kind.ALIGNMENT)
    else:
        # Nodes with the same hints have the same winner: decide each pattern once.
        winners: dict[bytes, int | None] = {}
        for i in np.flatnonzero(~has_preferred & ~refused).tolist():
            hints = [ok[i] for ok in sat]
            pattern = b"".join(h.tobytes() for h in hints)
            if pattern not in winners:
                winners[pattern] = _non_preferred(plan, hints)
            index = winners[pattern]
            if index is None:
                refuse(np.arange(count) == i, Kind.ALIGNMENT)
            else:
                chosen[i] = index
    bound = plan.options.max_numa_nodes
    if bound is not None:
        refuse(plan.counts[chosen] > bound, Kind.MAX_NUMA_NODES)
    memory_index = chosen.copy()
    if memory is not None and unit_memory:
        memory_index, memory_refused = _memory_choice(plan, memory, chosen, has_preferred)
        refuse(memory_refused, Kind.MEMORY)
    merged_preferred = has_preferred & (plan.options.policy is not PolicyName.NONE)
    return _finish(
        plan, rows, memo, chosen=chosen, memory_index=memory_index, refused=refused,
        kind=kind, short=short, mix=mix, preferred=merged_preferred,
    )  # fmt: skip


def _hints(plan: Plan, rows: Ints) -> tuple[list[Bools], _MemoryHints | None]:
    """Per provider, (rows x masks): the mask is a hint; and the memory provider's."""
    count = rows.shape[0]
    member_t = plan.member.T
    sat: list[Bools] = []
    memory: _MemoryHints | None = None
    memory_free_ok: list[Bools] = []
    for provider in plan.providers:
        ok = np.broadcast_to(provider.holds, (count, len(plan.masks))).copy()
        for index, columns in enumerate(provider.columns):
            asked = provider.wanted[index].amount
            free = _per_position(rows, columns) @ member_t
            fits = free >= asked
            if provider.memory:
                # Whether the merged mask's free memory holds it counts no reuse
                # (`isAffinitySatisfyRequest`); the hints do (`calculateHints`).
                memory_free_ok.append(fits)
                if provider.reuse:
                    fits = free + provider.reuse[index] >= asked
            ok &= fits
        if provider.memory:
            groups_allow = _groups_allow(plan, rows)
            ok &= groups_allow
            memory = _MemoryHints(ok, memory_free_ok, groups_allow)
        sat.append(ok)
    return sat, memory


class _MemoryHints(NamedTuple):
    sat: Bools  # (rows x masks) the memory provider's hints
    free_ok: list[Bools]  # per size: the mask's free amount holds it
    groups_allow: Bools  # memory groups allow the mask


def reusing_memory(plan: Plan, reusable: Mapping[tuple[int, str], int]) -> Plan:
    """`plan` for a container that may reuse the bytes `reusable` holds per (NUMA mask, kind:
    "memory" or a huge page size) (`getPodReusableMemory`): the memory provider lists a mask whose
    free memory with what is reusable on exactly it holds the request (`calculateHints`); node-wide
    totals allow for the most any one mask offers."""
    offered = {key: amount for key, amount in reusable.items() if amount > 0}
    if not offered:
        return plan
    names = {"memory" if kind == "memory" else f"hugepages-{kind}" for _, kind in offered}
    per_mask = [_to_ids(m, plan.ids) for m in plan.masks]

    def kind_of(resource: str) -> str:
        return resource if resource == "memory" else resource.removeprefix("hugepages-")

    providers = list(plan.providers)
    for i, provider in enumerate(providers):
        if provider.memory and any(w.resource in names for w in provider.wanted):
            reuse = tuple(
                np.array([offered.get((m, kind_of(w.resource)), 0) for m in per_mask], np.int64)
                for w in provider.wanted
            )
            providers[i] = replace(provider, reuse=reuse)
    most: dict[str, int] = {}
    for (_, kind), amount in offered.items():
        most[kind] = max(most.get(kind, 0), amount)
    totals = tuple(
        (resource, max(0, asked - most.get(kind_of(resource), 0)), columns)
        if resource in names
        else (resource, asked, columns)
        for resource, asked, columns in plan.totals
    )
    return replace(plan, providers=tuple(providers), totals=totals)


def _preferred_anywhere(plan: Plan, sat: list[Bools], count: int) -> Bools:
    """(rows x masks): every provider prefers the mask (no memory hint at all: no preference)."""
    preferred_any: Bools = np.ones((count, len(plan.masks)), dtype=bool)
    if plan.options.policy is PolicyName.SINGLE_NUMA_NODE:
        preferred_any &= plan.counts == 1
    for provider, ok in zip(plan.providers, sat, strict=True):
        both = ok & provider.pref
        if provider.memory:
            any_hint: Bools = np.asarray(ok.any(axis=1), dtype=bool)
            both = np.where(any_hint[:, None], both, True)
        preferred_any &= both
    if not plan.providers:
        preferred_any[:] = False
        preferred_any[:, plan.masks.index(plan.every)] = True
    return preferred_any


def _per_position(rows: Ints, columns: Ints) -> Ints:
    picked = rows[:, columns]
    return picked.sum(axis=2) if picked.ndim == 3 else picked


def _groups_allow(plan: Plan, rows: Ints) -> Bools:
    """Per (row, mask): each node holds no pod memory, or holds it for exactly this group."""
    groups = rows[:, [plan.layout.group(p) for p in range(len(plan.ids))]]
    count = rows.shape[0]
    if not groups.any() or len(plan.ids) >= 63:
        # Groups are masks of NUMA positions in 64 bits: not tracked on larger machines.
        return np.ones((count, len(plan.masks)), dtype=bool)
    masks = np.array(plan.masks, dtype=np.int64)
    held = groups[:, None, :]
    fine = (held == 0) | (held == masks[None, :, None])
    return np.asarray(np.all(fine | (plan.member[None, :, :] == 0), axis=2))


def _non_preferred(plan: Plan, sat: Sequence[Bools]) -> int | None:
    """The non-preferred winner (`best_non_preferred` on the masks the hints AND to), by index."""
    if not plan.full:
        # Beyond the kubelet's reach: the narrowest mask every resource fits.
        fits = np.ones(len(plan.masks), dtype=bool) & np.all(sat, axis=0)
        found = np.flatnonzero(fits)
        return int(found[np.argmin(plan.rank[found])]) if found.size else None
    listed: list[Ints] = []
    narrowest: list[int] = []
    masks = np.array(plan.masks, dtype=np.int64)
    for ok, provider in zip(sat, plan.providers, strict=True):
        if ok.any():
            listed.append(masks[ok])
            narrowest.append(int(plan.counts[ok].min()))
        elif not provider.memory:  # no memory hint: no preference
            listed.append(np.array([plan.every], dtype=np.int64))
    produced = np.zeros(1 << len(plan.ids), dtype=bool)
    produced[plan.every] = True
    for values in listed:
        current = np.flatnonzero(produced)
        produced = np.zeros_like(produced)
        produced[np.bitwise_and.outer(current, values).ravel()] = True
    produced[0] = False
    rank = plan.rank  # mask value v is the full space's mask v - 1
    winner = best_non_preferred(
        np.flatnonzero(produced).tolist(), max(narrowest, default=0), lambda m: (rank[m - 1],)
    )
    return None if winner is None else winner - 1


def _memory_choice(
    plan: Plan, memory: _MemoryHints, chosen: Ints, preferred: Bools
) -> tuple[Ints, Bools]:
    """The memory manager's mask per row (an index), and where it refuses."""
    count = chosen.shape[0]
    provider = next(p for p in plan.providers if p.memory)
    order = np.where(provider.pref, 0, _BIG // 2) + plan.narrow_rank
    if plan.options.policy is PolicyName.NONE:
        has: Bools = np.asarray(memory.sat.any(axis=1), dtype=bool)
        return np.argmin(np.where(memory.sat, order, _BIG), axis=1), ~has
    rows_index = np.arange(count)
    holds = np.ones(count, dtype=bool)
    for fits in memory.free_ok:
        holds &= fits[rows_index, chosen]
    refused = holds & (plan.counts[chosen] > 1) & ~memory.groups_allow[rows_index, chosen]
    result = chosen.copy()
    for i in np.flatnonzero(~holds).tolist():
        within = plan.member[int(chosen[i])]
        inside = (plan.member >= within).all(axis=1) & memory.sat[i]
        if not inside.any():
            refused[i] = True
            continue
        pick = int(np.argmin(np.where(inside, order, _BIG)))
        if preferred[i] and not provider.pref[pick]:
            refused[i] = True
        result[i] = pick
    return result, refused


def _finish(
    plan: Plan,
    rows: Ints,
    memo: GpuMemo,
    *,
    chosen: Ints,
    memory_index: Ints,
    refused: Bools,
    kind: list[Kind | None],
    short: Ints,
    mix: WorkloadMix | None,
    preferred: Bools,
) -> Decided:
    count = rows.shape[0]
    need = plan.need
    gpus: list[tuple[int, ...]] = [()] * count
    pairs: list[tuple[int, int] | None] = [None] * count
    links = np.ones(count)
    gpu_fill = np.zeros(count)
    tables = plan.tables
    if need.gpus:
        best_bandwidth = _best_bandwidth(plan, memo)
        bits_column = plan.layout.gpu_bits
        seen: dict[tuple[int, int], tuple[int, ...] | None] = {}
        for i in np.flatnonzero(~refused).tolist():
            free_bits = int(rows[i, bits_column])
            index = int(chosen[i])
            key = (free_bits & plan.gpu_matching, index)
            if key not in seen:
                seen[key] = _gpu_choice(plan, free_bits, plan.gpu_in_mask[index], memo)
            chosen_gpus = seen[key]
            if chosen_gpus is None:
                refused[i] = True
                kind[i] = Kind.GPU_LINKS
                inside = bits(free_bits & plan.gpu_in_mask[index])
                best = choose_gpus(tables, frozenset(inside), need.gpus,
                                   GpuLinksMode.PREFERRED, memo)  # fmt: skip
                pairs[i] = first_unlinked_pair(tables, best or ())
                continue
            gpus[i] = chosen_gpus
            if len(chosen_gpus) >= 2 and best_bandwidth > 0:
                links[i] = set_bandwidth(tables, chosen_gpus) / best_bandwidth
            total = int(plan.gpu_all_in_mask[index])
            if total:
                free_in = (free_bits & plan.gpu_in_mask[index]).bit_count()
                gpu_fill[i] = min(1.0, (total - free_in + len(chosen_gpus)) / total)
    span = np.minimum(1.0, plan.narrowest / plan.counts[chosen])
    fills: list[Floats] = [gpu_fill] if need.gpus else []
    exclusive = need.exclusive_cpus
    if exclusive:
        capacity = plan.cpu_capacity[chosen]
        free_in = (rows[:, plan.free.cpu] * plan.member[chosen]).sum(axis=1)
        used = (capacity - free_in + exclusive) / np.maximum(capacity, 1)
        fills.append(np.where(capacity > 0, np.minimum(1.0, used), np.nan))
    pack = _mean_fill(fills, span)
    scores = _compose(span, links, pack, with_gpus=bool(need.gpus))
    scores[refused] = -1
    terms = _rank_terms(plan, rows, span, links, pack, chosen=chosen, gpus=gpus, mix=mix)
    return Decided(plan, scores, kind, chosen, memory_index, gpus, pairs, short, terms, preferred)


class RankTerms(NamedTuple):
    """Per row, the node rank's terms but its `Hosts` weights, kept as the nodes judged change."""

    alignment: Floats  # the score's span and link terms, 0..1
    fill: Floats  # the score's pack term (best fit)
    # Under a mix (`packing.usable_gpus`, before and after the placement): free GPUs per row, GPUs
    # the mix's copies use per (row, shape); empty without a mix.
    free_before: Ints
    used_before: Ints
    free_after: Ints
    used_after: Ints


def node_ranks(
    terms: RankTerms, scores: Ints, mix: WorkloadMix | None, hosts: Hosts | None
) -> Floats:
    """The node rank (`packing`) of each row, -1 where refused (`scores` < 0); `hosts` weighs the
    mix's shapes by scarcity (without them, by share)."""
    if not mix:
        rank = node_rank(terms.alignment, terms.fill)
    else:
        weights = hosts.weights() if hosts is not None and hosts.mix == mix else None
        before = stranded(terms.free_before, terms.used_before, mix, weights)
        after = stranded(terms.free_after, terms.used_after, mix, weights)
        rank = node_rank(terms.alignment, pack_of_growth(after - before, terms.fill))
    rank[scores < 0] = -1.0
    return rank


def _rank_terms(
    plan: Plan,
    rows: Ints,
    span: Floats,
    links: Floats,
    fill: Floats,
    *,
    chosen: Ints,
    gpus: list[tuple[int, ...]],
    mix: WorkloadMix | None,
) -> RankTerms:
    """`node_ranks`' row terms."""
    need = plan.need
    w_span, w_links, _ = GPU_WEIGHTS if need.gpus else CPU_WEIGHTS
    alignment = (w_span * span + w_links * links) / (w_span + w_links)
    if not mix:
        none = np.zeros((0, 0), dtype=np.int64)
        return RankTerms(alignment, fill, none, none, none, none)
    free_gpus, free_cpus = plan.free.per_numa(rows)
    taken_gpus = np.zeros_like(free_gpus)
    if need.gpus:
        bits_of = {chosen_gpus: sum(1 << g for g in chosen_gpus) for chosen_gpus in set(gpus)}
        taken = np.array([bits_of[chosen_gpus] for chosen_gpus in gpus], dtype=np.int64)
        taken_gpus = np.bitwise_count(taken[:, None] & plan.position_gpu_bits).astype(np.int64)
    taken_cpus = np.zeros_like(free_cpus)
    exclusive = need.exclusive_cpus
    if exclusive:
        member = plan.member[chosen]
        single = plan.counts[chosen] == 1
        taken_cpus[single] = member[single] * exclusive
        for i in np.flatnonzero(~single).tolist():
            # Spread over the mask's NUMA nodes, fullest (most free) first.
            left = exclusive
            fullest = sorted(np.flatnonzero(member[i]).tolist(), key=lambda p: -free_cpus[i, p])
            for position in fullest:
                take = min(left, int(free_cpus[i, position]))
                taken_cpus[i, position] = take
                left -= take
    capacity, cpu_capacity = plan.free.numa_gpu_capacity, plan.free.numa_cpu_capacity
    before = usable_gpus(free_gpus, free_cpus, capacity, mix, numa_cpu_capacity=cpu_capacity)
    gpus_after = np.maximum(free_gpus - taken_gpus, 0)
    cpus_after = np.maximum(free_cpus - taken_cpus, 0)
    after = usable_gpus(gpus_after, cpus_after, capacity, mix, numa_cpu_capacity=cpu_capacity)
    return RankTerms(alignment, fill, *before, *after)


def _mean_fill(fills: list[Floats], like: Floats) -> Floats:
    """The score's pack term as an array: the mean of `fills` (NaN: none), else 1.0."""
    total = np.zeros_like(like)
    count = np.zeros_like(like)
    for fill in fills:
        present = ~np.isnan(fill)
        total = total + np.where(present, fill, 0.0)
        count = count + present
    return np.where(count > 0, total / np.maximum(count, 1), 1.0)


def _compose(span: Floats, links: Floats, pack: Floats, *, with_gpus: bool) -> Ints:
    """The `scoring` formula over arrays, term by term in the order of its scalar oracle
    (`compose_score` in tests/engine/allocation/score_oracle.py), so every float is the same IEEE
    double (`rint` rounds half to even, as `round` does); `pack` is `_mean_fill`'s."""
    w_span, w_links, w_pack = GPU_WEIGHTS if with_gpus else CPU_WEIGHTS
    total = w_span * span + w_links * links + w_pack * pack
    rounded = np.clip(np.rint(100 * total / (w_span + w_links + w_pack)), 0, 100)
    return np.asarray(rounded, dtype=np.int64)


def _to_ids(mask: int, ids: tuple[int, ...]) -> int:
    return sum(1 << numa for p, numa in enumerate(ids) if mask >> p & 1)


def _best_bandwidth(plan: Plan, memo: GpuMemo) -> float:
    every = frozenset(bits(plan.gpu_matching))
    best = choose_gpus(plan.tables, every, plan.need.gpus, GpuLinksMode.PREFERRED, memo)
    return set_bandwidth(plan.tables, best) if best else 0.0


def _gpu_choice(plan: Plan, free_bits: int, in_mask: int, memo: GpuMemo) -> tuple[int, ...] | None:
    """The unit's GPUs in the device manager's order (`devicesToAllocate`): the best set on the
    mask's NUMA nodes, else all those, then others, `noAffinity` last; None for no required set."""
    need = plan.need
    tables = plan.tables
    mode = plan.options.gpu_links
    free = free_bits & plan.gpu_matching
    no_numa = sum(1 << g for g, numa in tables.gpu_numa.items() if numa is None)
    inside = free & in_mask & ~no_numa
    if inside.bit_count() >= need.gpus:
        return choose_gpus(tables, frozenset(bits(inside)), need.gpus, mode, memo)
    chosen = set(bits(inside))
    for pool in (free & ~in_mask & ~no_numa, free & no_numa):
        missing = need.gpus - len(chosen)
        if missing <= 0 or not pool:
            continue
        extra = choose_gpus(
            tables, frozenset(bits(pool)), min(missing, pool.bit_count()),
            GpuLinksMode.PREFERRED, memo,
        )  # fmt: skip
        chosen |= set(extra or ())
    ordered = tuple(sorted(chosen))
    if mode is GpuLinksMode.REQUIRED and first_unlinked_pair(tables, ordered):
        return None
    return ordered


def shortfall(plan: Plan, decided: Decided, index: int, row: Ints) -> Shortfall:
    """The structured refusal of row `index` (read only when someone asks)."""
    why = decided.kind[index]
    assert why is not None, "only refused rows have a shortfall"
    policy = plan.options.policy.value
    if why is Kind.SHARED_POOL:
        return Shortfall(why, policy, plan.wanted, bound=int(row[plan.free.cpu].sum()))
    if why is Kind.GPU_LINKS:
        return Shortfall(why, policy, plan.wanted, pair=decided.pair[index])
    shown, free = _per_numa(plan, row)
    if why is Kind.SHORT:
        resource, _, columns = plan.totals[int(decided.short[index])]
        total = int(row[columns].sum())
        return Shortfall(
            why, policy, plan.wanted, resource=resource, total=total, free=free, free_of=shown
        )
    width = decided.mask(index).bit_count() if why is Kind.MAX_NUMA_NODES else None
    return Shortfall(
        why, policy, tuple(shown) or plan.wanted, free=free, free_of=shown,
        bound=plan.options.max_numa_nodes, width=width,
    )  # fmt: skip


def _per_numa(
    plan: Plan, row: Ints
) -> tuple[tuple[Wanted, ...], tuple[tuple[int | None, tuple[int, ...]], ...]]:
    """The NUMA-bound resources asked, and what each NUMA node has free of them."""
    shown: list[Wanted] = []
    amounts: list[Ints] = []
    for provider in plan.providers:
        shown.extend(provider.wanted)
        amounts.extend(_per_position(row[None, :], c)[0] for c in provider.columns)
    if not shown:
        return (), ()
    tables = plan.tables
    free = tuple(
        (numa, tuple(int(a[p]) for a in amounts))
        for p, numa in enumerate(plan.ids)
        if any(int(a[p]) for a in amounts)
        or tables.cpu_capacity.get(numa)
        or tables.memory_capacity.get(numa)
        or numa in tables.gpu_numa.values()
    )
    return tuple(shown), free
