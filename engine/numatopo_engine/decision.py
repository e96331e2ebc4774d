"""One placement unit on one node: the kubelet's decision, then numatopo's own checks.

This is the only place a NUMA placement is decided; `allocate`, `evaluate` and
`evaluate_many` (extender filter/prioritize/bind, the assigner, `numatopo assign`,
`numatopo simulate`) all call `decide`.

1. Hint providers, as the kubelet's (`hints` for the inputs):
   * CPUs (static CPU manager, exclusive integer CPUs): a mask is a hint when its free
     allocatable CPUs hold the request; preferred when its width is the fewest NUMA
     nodes whose CPUs (all of them, reserved ones too) could hold it. With
     `smt: full-cores` only wholly free whole cores count (numatopo's own rule).
   * devices (device manager), per resource name: a device counts in a mask when its
     NUMA node is in it; devices on no NUMA node count in none; a resource none of
     whose devices has a NUMA node gives no preference.
   * memory and huge pages (static memory manager), one hint list for all of them: a
     mask is a hint when it holds every requested size free and its nodes may serve
     it together (memory groups: `hints.FreeView.join_group`).
   `cpu: numa` (fractional CPUs) gives no CPU hint, as the kubelet gives none for a
   container without integer CPUs.
2. The merge and admission (`topology_manager`). Under `none` numatopo still places
   aligned where it can, as `best-effort` would, and admits what the kubelet admits.
3. The memory manager's own affinity: the merged mask if its free memory holds the
   request, else its best hint containing the mask (refused when there is none, or
   when that hint is not preferred while the merged one is).
4. numatopo's checks beyond the kubelet: `max-numa-nodes`, `gpu-links: required`, the
   last shared CPU.

Masks are searched over every NUMA node of the machine (all 2^N - 1 of them, as the
kubelet does, for N up to `FULL_SEARCH`); on larger machines, which the kubelet's
Topology Manager refuses to run on, only over the NUMA nodes that hold something the
request asks for, by increasing width within a fixed budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from math import comb

from numatopo_engine.annotations import CpuMode, GpuLinksMode, PolicyName
from numatopo_engine.gpu_assignment import GpuMemo, choose_gpus, first_unlinked_pair
from numatopo_engine.hints import FreeView, Need
from numatopo_engine.numamask import bits, make_mask
from numatopo_engine.refusals import Kind, Shortfall, Wanted
from numatopo_engine.request import TopologyOptions
from numatopo_engine.scoring import placement_score
from numatopo_engine.topology_manager import best_non_preferred, mask_order
from numatopo_engine.topology_tables import Tables

__all__ = ["FULL_SEARCH", "Choice", "Space", "decide", "narrowest_on_hardware"]

FULL_SEARCH = 10  # NUMA nodes up to which every mask is a candidate (1023 masks)
MASK_BUDGET = 16384  # masks per width on larger machines, best-stocked nodes first
DEFAULT_MAX_WIDTH = 8  # widest mask searched on larger machines (the kubelet's node cap)


@dataclass(frozen=True, slots=True)
class Space:
    """Candidate masks (bit n = NUMA id n) and how each was built from a smaller one, so
    a per-NUMA amount sums over every mask in one pass."""

    ids: tuple[int, ...]
    masks: tuple[int, ...]
    counts: tuple[int, ...]
    # Full subset spaces: mask k = mask prev[k] plus node ids[low[k]]; prev -1 = empty.
    prev: tuple[int, ...] = ()
    low: tuple[int, ...] = ()
    index: dict[int, int] = field(default_factory=dict)

    def sums(self, amounts: dict[int, int]) -> list[int]:
        if self.prev:
            values = [amounts.get(n, 0) for n in self.ids]
            out: list[int] = []
            for prev, low in zip(self.prev, self.low, strict=True):
                out.append((out[prev] if prev >= 0 else 0) + values[low])
            return out
        return [sum(amounts.get(n, 0) for n in bits(m)) for m in self.masks]


def full_space(ids: tuple[int, ...]) -> Space:
    masks: list[int] = []
    prev: list[int] = []
    low: list[int] = []
    counts: list[int] = []
    for k in range(1, 1 << len(ids)):
        lowest = k & -k
        position = lowest.bit_length() - 1
        rest = k ^ lowest
        prev.append(rest - 1)  # space index of `rest` (k - 1 for every k >= 1)
        low.append(position)
        masks.append((masks[rest - 1] if rest else 0) | 1 << ids[position])
        counts.append(k.bit_count())
    return Space(
        ids,
        tuple(masks),
        tuple(counts),
        tuple(prev),
        tuple(low),
        {m: i for i, m in enumerate(masks)},
    )


def bounded_space(ids: list[int], stock: Callable[[int], float], max_width: int) -> Space:
    """Masks of up to `max_width` of `ids` (trimmed to the best-stocked nodes when a width
    has more than `MASK_BUDGET`), and every one of `ids` together."""
    masks: list[int] = []
    for size in range(1, min(max_width, len(ids)) + 1):
        pool = ids
        if comb(len(ids), size) > MASK_BUDGET:
            keep = size
            while comb(keep + 1, size) <= MASK_BUDGET:
                keep += 1
            pool = sorted(sorted(ids, key=lambda n: (-stock(n), n))[:keep])
        masks.extend(make_mask(c) for c in combinations(pool, size))
    every = make_mask(ids)
    if every not in masks:
        masks.append(every)
    return Space(
        tuple(ids),
        tuple(masks),
        tuple(m.bit_count() for m in masks),
        index={m: i for i, m in enumerate(masks)},
    )


@dataclass(frozen=True, slots=True)
class _Provider:
    """One resource's hints over a space: per mask, whether it holds the request now
    (`sat`) and whether it is preferred (`pref`)."""

    wanted: tuple[Wanted, ...]
    sat: list[bool]
    pref: list[bool]
    narrowest: int  # the fewest NUMA nodes the hardware needs (the kubelet's minAffinitySize)
    free: tuple[dict[int, int], ...]  # per wanted: free per NUMA id
    needs: tuple[int, ...]
    memory: bool = False


@dataclass(frozen=True, slots=True)
class Choice:
    """The decision for one unit: where (`mask`; None when the pod is admitted with no
    NUMA affinity), the memory manager's nodes, and the node score."""

    mask: int
    preferred: bool
    memory_mask: int
    score: int
    gpus: tuple[int, ...] = ()


def decide(
    tables: Tables,
    free: FreeView,
    need: Need,
    options: TopologyOptions,
    *,
    floor: int,
    prefer_closest: bool,
    spaces: dict[tuple[object, ...], Space],
    gpu_memo: GpuMemo,
) -> Choice | Shortfall:
    """Where `need` goes on a node whose free resources are `free`, or why it does not."""
    policy = options.policy
    wanted = _wanted(need)
    short = _short(tables, free, need, policy, wanted)
    if short is not None:
        return short
    exclusive = need.exclusive_cpus
    if exclusive and len(free.cpus) - exclusive < floor:
        # The kubelet never empties the pool non-exclusive containers run on
        # (`state.shared_floor`); `free` already lacks what earlier units took.
        return Shortfall(Kind.SHARED_POOL, policy.value, wanted, bound=len(free.cpus))
    space = _space(tables, free, need, options, spaces)
    providers = _providers(tables, free, need, space)
    single = policy is PolicyName.SINGLE_NUMA_NODE
    key = mask_order(tables.distances, closest=prefer_closest and not single)
    everything = make_mask(tables.numa_ids)
    mask, preferred = _merge(space, providers, key, everything, single=single)
    if mask is None or (not preferred and policy in _ALIGNED_ONLY):
        return _refusal(Kind.ALIGNMENT, tables, policy, wanted, providers)
    if options.max_numa_nodes is not None and mask.bit_count() > options.max_numa_nodes:
        return _refusal(
            Kind.MAX_NUMA_NODES, tables, policy, wanted, providers,
            bound=options.max_numa_nodes, width=mask.bit_count(),
        )  # fmt: skip
    memory = next((p for p in providers if p.memory), None)
    memory_mask = mask
    if memory is not None:
        found = _memory_affinity(space, memory, mask, preferred, policy=policy, groups=free.groups)
        if found is None:
            return _refusal(Kind.MEMORY, tables, policy, wanted, providers)
        memory_mask = found
    gpus: tuple[int, ...] = ()
    if need.gpus:
        gpus = _gpu_choice(tables, free, need, options=options, mask=mask, memo=gpu_memo)
        if len(gpus) < need.gpus:
            candidates = _gpus_in(tables, free, need, mask)
            best = choose_gpus(tables, candidates, need.gpus, GpuLinksMode.PREFERRED, gpu_memo)
            return Shortfall(
                Kind.GPU_LINKS, policy.value, wanted, pair=first_unlinked_pair(tables, best or ())
            )
    narrowest = max((p.narrowest for p in providers), default=1)
    score = placement_score(
        tables, free, mask=mask, min_width=narrowest, cpus=need.exclusive_cpus, gpus=gpus,
        gpu_resource=need.gpu_resource, memo=gpu_memo,
    )  # fmt: skip
    return Choice(mask, preferred, memory_mask, score, gpus)


_ALIGNED_ONLY = (PolicyName.RESTRICTED, PolicyName.SINGLE_NUMA_NODE)


def _wanted(need: Need) -> tuple[Wanted, ...]:
    out: list[Wanted] = []
    if need.cpus and need.cpu_mode is not CpuMode.NONE:
        out.append(Wanted("CPUs", need.cpus))
    if need.memory_bytes:
        out.append(Wanted("memory", need.memory_bytes, in_bytes=True))
    out.extend(Wanted(f"hugepages-{s}", a, in_bytes=True) for s, a in need.hugepages if a)
    if need.gpus:
        out.append(Wanted(need.gpu_resource or "GPUs", need.gpus))
    if need.nics:
        out.append(Wanted(need.nic_resource or "NICs", need.nics))
    return tuple(out)


def _matches(resource: str, wanted: str | None) -> bool:
    return wanted is None or resource == wanted


def _short(
    tables: Tables, free: FreeView, need: Need, policy: PolicyName, wanted: tuple[Wanted, ...]
) -> Shortfall | None:
    """The first resource the whole node has too little of, free."""
    totals: list[tuple[str, int, int]] = []
    if need.cpus and need.cpu_mode is CpuMode.EXCLUSIVE:
        pool = free.cpus
        if need.full_cores:
            pool = _whole_core_cpus(tables, free.cpus)
        totals.append(("CPUs", need.cpus, len(pool)))
    elif need.cpus and need.cpu_mode is CpuMode.NUMA:
        totals.append(("CPUs", need.cpus, len(free.cpus)))
    if need.memory_bytes:
        totals.append(("memory", need.memory_bytes, sum(max(v, 0) for v in free.memory.values())))
    for size, amount in need.hugepages:
        have = sum(max(v, 0) for (n, s), v in free.hugepages.items() if s == size)
        totals.append((f"hugepages-{size}", amount, have))
    if need.gpus:
        have = sum(1 for g in free.gpus if _matches(tables.gpu_resource[g], need.gpu_resource))
        totals.append((need.gpu_resource or "GPUs", need.gpus, have))
    if need.nics:
        have = sum(1 for n in free.nics if _matches(tables.nic_resource[n], need.nic_resource))
        totals.append((need.nic_resource or "NICs", need.nics, have))
    for resource, asked, have in totals:
        if have < asked:
            return Shortfall(Kind.SHORT, policy.value, wanted, resource=resource, total=have)
    return None


def _whole_core_cpus(tables: Tables, cpus: set[int]) -> set[int]:
    out: set[int] = set()
    tpc = tables.threads_per_core
    for core in tables.whole_cores:
        threads = tables.core_threads[core]
        if len(threads) == tpc and all(t in cpus for t in threads):
            out.update(threads)
    return out


def _per_numa_cpus(
    tables: Tables, free: FreeView, need: Need
) -> tuple[dict[int, int], dict[int, int]]:
    """Free and hardware CPUs per NUMA id, as the CPU manager counts them."""
    if need.full_cores:
        tpc = tables.threads_per_core
        free_count: dict[int, int] = {}
        capacity: dict[int, int] = {}
        for core in tables.whole_cores:
            threads = tables.core_threads[core]
            if len(threads) != tpc:
                continue
            numa_id = tables.cpu_numa[threads[0]]
            capacity[numa_id] = capacity.get(numa_id, 0) + tpc
            if all(t in free.cpus for t in threads):
                free_count[numa_id] = free_count.get(numa_id, 0) + tpc
        return free_count, capacity
    free_count = {n: len(free.cpus & tables.numa_allocatable[n]) for n in tables.numa_ids}
    return free_count, dict(tables.numa_online)


def _devices(
    numa_of: dict[int, int | None] | dict[str, int | None],
    resource_of: dict[int, str] | dict[str, str],
    free_devices: set[int] | set[str],
    resource: str | None,
) -> tuple[dict[int, int], dict[int, int], bool]:
    free_count: dict[int, int] = {}
    capacity: dict[int, int] = {}
    located = False
    for device, numa_id in numa_of.items():
        if not _matches(resource_of[device], resource) or numa_id is None:  # type: ignore[index]
            continue
        located = True
        capacity[numa_id] = capacity.get(numa_id, 0) + 1
        if device in free_devices:
            free_count[numa_id] = free_count.get(numa_id, 0) + 1
    return free_count, capacity, located


def _candidate_ids(tables: Tables, free: FreeView, need: Need) -> list[int]:
    ids: set[int] = set()
    if need.exclusive_cpus:
        ids.update(n for n, c in tables.cpu_capacity.items() if c)
    if need.has_memory:
        ids.update(n for n, c in tables.memory_capacity.items() if c)
        ids.update(n for (n, _), c in tables.numa_hugepages.items() if c)
    if need.gpus:
        ids.update(n for n in tables.gpu_numa.values() if n is not None)
    if need.nics:
        ids.update(n for n in tables.nic_numa.values() if n is not None)
    return sorted(ids)


def _space(
    tables: Tables,
    free: FreeView,
    need: Need,
    options: TopologyOptions,
    spaces: dict[tuple[object, ...], Space],
) -> Space:
    ids = tables.numa_ids
    if len(ids) <= FULL_SEARCH:
        key: tuple[object, ...] = (ids,)
        space = spaces.get(key)
        if space is None:
            space = spaces[key] = full_space(ids)
        return space
    candidates = _candidate_ids(tables, free, need)
    if len(candidates) <= FULL_SEARCH:
        key = (tuple(candidates),)
        space = spaces.get(key)
        if space is None:
            space = spaces[key] = full_space(tuple(candidates))
        return space
    width = 1 if options.policy is PolicyName.SINGLE_NUMA_NODE else (
        options.max_numa_nodes or DEFAULT_MAX_WIDTH)  # fmt: skip
    cpus, _ = _per_numa_cpus(tables, free, need)

    def stock(numa_id: int) -> float:
        return float(cpus.get(numa_id, 0) + free.memory.get(numa_id, 0) // 2**30)

    return bounded_space(candidates, stock, width)


def _providers(tables: Tables, free: FreeView, need: Need, space: Space) -> list[_Provider]:
    providers: list[_Provider] = []
    counts = space.counts
    n_all = len(space.ids)

    def device_like(
        wanted: Wanted, asked: int, free_count: dict[int, int], capacity: dict[int, int]
    ) -> _Provider:
        have = space.sums(free_count)
        hardware = space.sums(capacity)
        widths = [c for c, h in zip(counts, hardware, strict=True) if h >= asked]
        narrowest = min(widths, default=n_all)
        sat = [h >= asked for h in have]
        pref = [c == narrowest for c in counts]
        return _Provider((wanted,), sat, pref, narrowest, (free_count,), (asked,))

    if need.exclusive_cpus:
        free_count, capacity = _per_numa_cpus(tables, free, need)
        providers.append(device_like(Wanted("CPUs", need.cpus), need.cpus, free_count, capacity))
    if need.has_memory:
        providers.append(_memory_provider(tables, free, need, space))
    if need.gpus:
        free_count, capacity, located = _devices(
            tables.gpu_numa, tables.gpu_resource, free.gpus, need.gpu_resource
        )
        if located:
            name = need.gpu_resource or "GPUs"
            providers.append(device_like(Wanted(name, need.gpus), need.gpus, free_count, capacity))
    if need.nics:
        free_count, capacity, located = _devices(
            tables.nic_numa, tables.nic_resource, free.nics, need.nic_resource
        )
        if located:
            name = need.nic_resource or "NICs"
            providers.append(device_like(Wanted(name, need.nics), need.nics, free_count, capacity))
    return providers


def _memory_provider(tables: Tables, free: FreeView, need: Need, space: Space) -> _Provider:
    kinds: list[tuple[Wanted, dict[int, int], dict[int, int]]] = []
    if need.memory_bytes:
        kinds.append((
            Wanted("memory", need.memory_bytes, in_bytes=True),
            {n: max(v, 0) for n, v in free.memory.items()},
            dict(tables.memory_capacity),
        ))  # fmt: skip
    for size, amount in need.hugepages:
        if amount:
            kinds.append((
                Wanted(f"hugepages-{size}", amount, in_bytes=True),
                {n: max(v, 0) for (n, s), v in free.hugepages.items() if s == size},
                {n: v for (n, s), v in tables.numa_hugepages.items() if s == size},
            ))  # fmt: skip
    masks = space.masks
    holds = [True] * len(masks)
    fits = [True] * len(masks)
    for wanted, free_amounts, capacity in kinds:
        for k, (h, f) in enumerate(
            zip(space.sums(capacity), space.sums(free_amounts), strict=True)
        ):
            holds[k] = holds[k] and h >= wanted.amount
            fits[k] = fits[k] and f >= wanted.amount
    narrowest = min(
        (c for c, h in zip(space.counts, holds, strict=True) if h), default=len(space.ids)
    )
    groups = free.groups
    sat = [h and f and _group_allows(groups, m) for h, f, m in zip(holds, fits, masks, strict=True)]
    pref = [c == narrowest for c in space.counts]
    return _Provider(
        tuple(w for w, _, _ in kinds), sat, pref, narrowest,
        tuple(f for _, f, _ in kinds), tuple(w.amount for w, _, _ in kinds), memory=True,
    )  # fmt: skip


def _group_allows(groups: dict[int, int], mask: int) -> bool:
    """The memory manager lets `mask` serve memory: each of its nodes holds no pod
    memory, or holds it for exactly this group (a single node: its own)."""
    if not groups:
        return True
    for numa_id in bits(mask):
        held = groups.get(numa_id, 0)
        if held and held != mask:
            return False
    return True


def _merge(
    space: Space,
    providers: Sequence[_Provider],
    key: Callable[[int], tuple[float, ...]],
    everything: int,
    *,
    single: bool,
) -> tuple[int | None, bool]:
    """`topology_manager.merge` on hints given as per-mask flags (same answers)."""
    masks, counts = space.masks, space.counts
    # A memory manager without any hint returns none at all, which the Topology Manager
    # reads as "no preference"; it refuses later, when it allocates (`_memory_affinity`).
    providers = [p for p in providers if not p.memory or any(p.sat)]
    if not providers:
        return everything, True
    preferred = [
        k
        for k in range(len(masks))
        if (not single or counts[k] == 1) and all(p.sat[k] and p.pref[k] for p in providers)
    ]
    if preferred:
        return min((masks[k] for k in preferred), key=key), True
    if single:
        return None, False
    lists: list[set[int]] = []
    narrowest: list[int] = []
    for provider in providers:
        listed = {masks[k] for k, ok in enumerate(provider.sat) if ok}
        if listed:
            narrowest.append(min(m.bit_count() for m in listed))
        lists.append(listed or {everything})
    produced = {everything}
    for listed in lists:
        produced = _ands(produced, listed)
    return best_non_preferred(produced, max(narrowest, default=0), key), False


def _ands(left: set[int], right: set[int]) -> set[int]:
    return {a & b for a in left for b in right}


def _memory_affinity(
    space: Space,
    memory: _Provider,
    mask: int,
    preferred: bool,
    *,
    policy: PolicyName,
    groups: dict[int, int],
) -> int | None:
    """The memory manager's NUMA nodes for the unit, or None when it refuses."""
    masks = space.masks
    if policy is not PolicyName.NONE:
        holds = all(
            sum(free.get(n, 0) for n in bits(mask)) >= asked
            for free, asked in zip(memory.free, memory.needs, strict=True)
        )
        if holds:
            return None if _violates_groups(groups, mask) else mask
        candidates = [k for k, ok in enumerate(memory.sat) if ok and masks[k] & mask == mask]
    else:
        candidates = [k for k, ok in enumerate(memory.sat) if ok]
    if not candidates:
        return None
    best = min(candidates, key=lambda k: (not memory.pref[k], masks[k].bit_count(), masks[k]))
    if preferred and policy is not PolicyName.NONE and not memory.pref[best]:
        return None
    return masks[best]


def _violates_groups(groups: dict[int, int], mask: int) -> bool:
    """A multi-node memory placement over nodes that already serve another group (or
    single-node memory); the memory manager's last check before it books."""
    return mask.bit_count() > 1 and not _group_allows(groups, mask)


def _gpus_in(tables: Tables, free: FreeView, need: Need, mask: int) -> frozenset[int]:
    return frozenset(
        g
        for g in free.gpus
        if _matches(tables.gpu_resource[g], need.gpu_resource)
        and ((n := tables.gpu_numa[g]) is None or mask >> n & 1)
    )


def _gpu_choice(
    tables: Tables,
    free: FreeView,
    need: Need,
    *,
    options: TopologyOptions,
    mask: int,
    memo: GpuMemo,
) -> tuple[int, ...]:
    """The GPUs the unit gets: the best set inside the mask (devices on no NUMA node
    count as inside); when the mask has too few, all of them and the rest from outside,
    as the device manager tops up an unaligned allocation."""
    inside = _gpus_in(tables, free, need, mask)
    mode = options.gpu_links
    if len(inside) >= need.gpus:
        return choose_gpus(tables, inside, need.gpus, mode, memo) or ()
    rest = (
        frozenset(g for g in free.gpus if _matches(tables.gpu_resource[g], need.gpu_resource))
        - inside
    )
    extra = choose_gpus(tables, rest, need.gpus - len(inside), GpuLinksMode.PREFERRED, memo)
    chosen = tuple(sorted(inside | set(extra or ())))
    if mode is GpuLinksMode.REQUIRED and first_unlinked_pair(tables, chosen):
        return ()
    return chosen


def _refusal(
    kind: Kind,
    tables: Tables,
    policy: PolicyName,
    wanted: tuple[Wanted, ...],
    providers: Sequence[_Provider],
    *,
    bound: int | None = None,
    width: int | None = None,
) -> Shortfall:
    """A refusal that shows, per NUMA node, what is free of each NUMA-bound resource."""
    shown: list[Wanted] = []
    amounts: list[dict[int, int]] = []
    for provider in providers:
        shown.extend(provider.wanted)
        amounts.extend(provider.free)
    ids = sorted({n for free in amounts for n in free} & set(tables.numa_ids))
    free = tuple((n, tuple(a.get(n, 0) for a in amounts)) for n in ids)
    return Shortfall(
        kind, policy.value, tuple(shown) or wanted, free=free, bound=bound, width=width
    )


def narrowest_on_hardware(tables: Tables, need: Need) -> int:
    """The fewest NUMA nodes whose hardware could hold `need` (the score's span term)."""
    nothing = FreeView(set(), set(), set(), {}, {})
    space = full_space(tables.numa_ids) if len(tables.numa_ids) <= FULL_SEARCH else (
        bounded_space(list(tables.numa_ids), lambda _: 0.0, DEFAULT_MAX_WIDTH))  # fmt: skip
    return max((p.narrowest for p in _providers(tables, nothing, need, space)), default=1)
