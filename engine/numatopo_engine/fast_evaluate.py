"""`evaluate` by table look-ups: the same answer as the general search, in a few microseconds.

The general path (`allocation._decide`) builds sets and dicts of what is free, hint
providers, and closures for every node. Under scope `pod` its answer depends on the
node's free state only through, per hint provider, the amount free on each candidate
NUMA node (and off-NUMA), plus the free GPU bitmask (which GPU set, its bandwidth) and
the free CPU bitmask (the score's CPU packing term). Everything else is a fact of the
hardware and the request, so it is worked out once per (hardware shape, request
sizing) into a `Plan`:

* the providers, their needs, `min_width`s and how to read each one's free amounts
  from a `FreeSignature` with integer operations (popcounts of CPU and GPU bitmasks;
  free whole cores by AND-ing the CPU bitmask with itself shifted by each core's
  sibling offsets);
* every candidate NUMA mask of each width the policy may search, with its mean SLIT
  distance, the preferred sub-masks each provider could use, and its GPU/CPU bitmasks;
* per (GPU resource, count, links mode), a table from free candidate GPU bitmask to the
  bandwidth of the set `choose_gpus` picks there (filled lazily, shared on `Tables`).

`decide` then replays `merging.choose_mask`'s comparisons (same keys, same order) over
those integers and scores the winner with `scoring.compose_score`.

Requests that take the fast path: scope `pod`, any policy, `max-numa-nodes`, CPU mode
and SMT mode, memory, huge pages, GPUs of one resource (any links mode) and NICs, on
nodes with at most `MAX_CANDIDATES` candidate NUMA nodes. Everything else goes to the
general path (`plan_for` returns None): scope `container`, more candidate NUMA nodes
(where the general search may trim its pool), a request with nothing NUMA-bound, and,
per node, a `gpu-links: required` request that finds no linked set (its reason names
the unlinked pair, which only the general path works out).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

from numatopo_engine.annotations import CpuMode, GpuLinksMode, Scope
from numatopo_engine.gpu_assignment import choose_gpus, set_bandwidth
from numatopo_engine.hints import FreeView, Need, Resource, build_resources
from numatopo_engine.merging import candidate_numa_ids
from numatopo_engine.numamask import bits, make_mask, mean_distance
from numatopo_engine.policies import rules_for
from numatopo_engine.refusals import explain, format_bytes, shared_pool
from numatopo_engine.request import TopologyOptions
from numatopo_engine.scoring import best_bandwidth, compose_score
from numatopo_engine.state import FreeSignature
from numatopo_engine.topology_tables import Tables

__all__ = ["MAX_CANDIDATES", "CandidateMask", "Plan", "decide", "explain_amounts", "plan_for"]

# Up to 8 candidate NUMA nodes (the kubelet's own limit) a plan lists every mask of
# every width (at most 255), and `merging` never trims its pool (C(8, 4) = 70 masks).
MAX_CANDIDATES = 8

# Free amount on each candidate NUMA node (by position) and off-NUMA.
Reader = Callable[[FreeSignature], tuple[list[int], int]]


@dataclass(frozen=True, slots=True)
class _Provider:
    """One hint provider of the request: `Resource` without the free amounts."""

    resource: Resource  # as built on an all-free node: name, need, capacity, min_width
    read: Reader
    min_width: int
    # Whether `preferred_cover` can differ from the whole mask: narrow, and a preferred
    # hint is narrower than some mask searched.
    narrow: bool


@dataclass(frozen=True, slots=True)
class CandidateMask:
    mask: int
    positions: tuple[int, ...]  # candidate positions of its NUMA nodes
    distance: float
    # Per provider with 1 < min_width < width: its preferred sub-masks (mask, positions).
    subsets: tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]
    gpu_bits: int  # GPUs of the requested resource in the mask or off-NUMA
    any_gpu_bits: int  # every GPU in the mask or off-NUMA (the score's GPU fill)
    any_gpu_count: int
    cpu_bits: int  # allocatable CPUs in the mask
    cpu_capacity: int


@dataclass(frozen=True, slots=True)
class _RefusalText:
    """`refusals.explain`'s wording with the free amounts left out: filled per node."""

    prefix: str  # up to the opening parenthesis
    # Per NUMA id: (provider, candidate position or -1 for none, in bytes, name) cells.
    rows: tuple[tuple[int, tuple[tuple[int, int, bool, str], ...]], ...]
    floating: tuple[tuple[int, str], ...]  # off-NUMA (provider, name) cells (device counts)


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything `decide` needs that does not depend on what is free."""

    need: Need
    options: TopologyOptions
    providers: tuple[_Provider, ...]
    candidate_bits: tuple[int, ...]  # 1 << NUMA id, by candidate position
    by_width: tuple[tuple[int, tuple[CandidateMask, ...]], ...]  # widths lowest..highest
    every: CandidateMask | None  # all candidates: the non-restrictive policies' last resort
    preferred_bound: int
    admits_non_preferred: bool
    min_width: int  # for the score's span term
    cpu_provider: int  # position of the CPUs provider, -1 when none
    gpus: int
    gpu_table: dict[int, float | None]
    best_bandwidth: float
    exclusive_cpus: int
    # 1: the node has no online reserved CPU, so exclusive CPUs must leave one allocatable
    # CPU free (`state.shared_floor`); 0: reserved CPUs keep the shared pool non-empty.
    shared_floor: int
    required: bool
    refusal: str | None  # the answer on every node, when the hardware cannot hold it
    refusal_text: _RefusalText


def plan_for(
    tables: Tables, need: Need, options: TopologyOptions, shared_floor: int
) -> Plan | None:
    """The plan for `need` (the pod's total) on this hardware, or None for the general
    path; `shared_floor` is the hardware's `state.shared_floor`."""
    if options.scope is not Scope.POD:
        return None
    every_free = FreeView(
        cpus=set(tables.cpu_numa),
        gpus=set(tables.gpu_numa),
        nics=set(tables.nic_numa),
        memory=dict(tables.memory_capacity),
        hugepages=dict(tables.numa_hugepages),
    )
    resources = build_resources(tables, every_free, need)
    candidates = candidate_numa_ids(resources)
    if not candidates or len(candidates) > MAX_CANDIDATES:
        return None
    rules = rules_for(options.policy)
    base = Plan(
        need=need,
        options=options,
        providers=(),
        candidate_bits=tuple(1 << n for n in candidates),
        by_width=(),
        every=None,
        preferred_bound=0,
        admits_non_preferred=rules.admits_non_preferred,
        min_width=1,
        cpu_provider=-1,
        gpus=need.gpus,
        gpu_table=tables.gpu_set_bandwidth.setdefault(
            (need.gpu_resource, need.gpus, options.gpu_links.value), {}
        ),
        best_bandwidth=best_bandwidth(tables, need.gpu_resource, need.gpus)
        if need.gpus >= 2
        else 0.0,
        exclusive_cpus=need.cpus if need.cpu_mode is CpuMode.EXCLUSIVE else 0,
        shared_floor=shared_floor,
        required=bool(need.gpus) and options.gpu_links is GpuLinksMode.REQUIRED,
        refusal=None,
        refusal_text=_RefusalText("", (), ()),
    )
    if any(r.min_width is None for r in resources):
        return replace(base, refusal=explain(need, resources, options))
    widths = [r.min_width or 1 for r in resources]
    lowest = max(widths)
    highest = min(rules.max_width(options.max_numa_nodes), len(candidates))
    providers = tuple(
        _Provider(
            resource=r,
            read=_reader(tables, r, need, candidates),
            min_width=w,
            narrow=r.narrow and w < highest,
        )
        for r, w in zip(resources, widths, strict=True)
    )
    gpu_of_resource = {g for g, r in tables.gpu_resource.items() if need.gpu_resource in (None, r)}

    def describe(positions: tuple[int, ...]) -> CandidateMask:
        numa_ids = [candidates[i] for i in positions]
        mask = make_mask(numa_ids)
        local = [g for g, n in tables.gpu_numa.items() if n is None or n in numa_ids]
        return CandidateMask(
            mask=mask,
            positions=positions,
            distance=mean_distance(mask, tables.distances),
            subsets=tuple(
                tuple(
                    (make_mask(candidates[i] for i in sub), sub)
                    for sub in combinations(positions, p.min_width)
                )
                if p.narrow and 1 < p.min_width < len(positions)
                else ()
                for p in providers
            ),
            gpu_bits=make_mask(g for g in local if g in gpu_of_resource),
            any_gpu_bits=make_mask(local),
            any_gpu_count=len(local),
            cpu_bits=make_mask(c for n in numa_ids for c in tables.numa_allocatable[n]),
            cpu_capacity=sum(len(tables.numa_allocatable[n]) for n in numa_ids),
        )

    positions = range(len(candidates))
    every = None
    if rules.may_use_every_node(options.max_numa_nodes) and len(candidates) > highest:
        every = describe(tuple(positions))
    return replace(
        base,
        providers=providers,
        by_width=tuple(
            (size, tuple(describe(combo) for combo in combinations(positions, size)))
            for size in range(lowest, highest + 1)
        ),
        every=every,
        preferred_bound=1 + sum(w - 1 for w, r in zip(widths, resources, strict=True) if r.narrow),
        min_width=lowest,
        cpu_provider=next((i for i, r in enumerate(resources) if r.name == "CPUs"), -1),
        refusal_text=_refusal_text(need, resources, options, candidates),
    )


def _refusal_text(
    need: Need, resources: Sequence[Resource], options: TopologyOptions, candidates: list[int]
) -> _RefusalText:
    # `explain` on a node with nothing free, cut at the per-NUMA part, is the prefix.
    zero = [
        Resource(r.name, r.need, {}, 0, r.capacity, r.floating_capacity, r.narrow)
        for r in resources
    ]
    whole = explain(need, zero, options)
    position = {n: i for i, n in enumerate(candidates)}
    return _RefusalText(
        prefix=whole[: whole.index("(NUMA ") if "(NUMA " in whole else whole.rindex("(")],
        rows=tuple(
            (
                numa,
                tuple(
                    (k, position.get(numa, -1) if numa in r.capacity else -1, _in_bytes(r), r.name)
                    for k, r in enumerate(resources)
                ),
            )
            for numa in sorted({n for r in resources for n in r.capacity})
        ),
        floating=tuple((k, r.name) for k, r in enumerate(resources) if r.floating_capacity),
    )


def _in_bytes(resource: Resource) -> bool:
    return resource.name == "memory" or resource.name.startswith("hugepages-")


def decide(tables: Tables, plan: Plan, free: FreeSignature) -> int | str | None:
    """The score, or the refusal reason, `_decide` gives; None: ask the general path."""
    if plan.refusal is not None:
        return plan.refusal
    providers = plan.providers
    amounts = [p.read(free) for p in providers]
    for provider, (vector, floating) in zip(providers, amounts, strict=True):
        if floating + sum(vector) < provider.resource.need:
            return explain_amounts(plan, amounts)
    exclusive = plan.exclusive_cpus
    if exclusive and plan.shared_floor:
        # `allocation._choose`'s node-wide check, after the same shortness test.
        free_cpus = free.cpu_mask.bit_count()
        if free_cpus - exclusive < plan.shared_floor:
            return shared_pool(exclusive, free_cpus)
    needs = [p.resource.need for p in providers]
    checks = list(zip(needs, amounts, strict=True))
    candidate_bits = plan.candidate_bits
    gpu_free = free.gpu_mask
    gpus = plan.gpus
    gpu_table = plan.gpu_table
    cpu_at = plan.cpu_provider
    cpu_need = needs[cpu_at] if cpu_at >= 0 else 0
    required = plan.required

    def bandwidth_in(entry: CandidateMask) -> float | None:
        candidates = gpu_free & entry.gpu_bits
        if candidates in gpu_table:
            return gpu_table[candidates]
        chosen = choose_gpus(tables, frozenset(bits(candidates)), gpus, plan.options.gpu_links)
        found = gpu_table[candidates] = None if chosen is None else set_bandwidth(tables, chosen)
        return found

    def fits(entry: CandidateMask) -> bool:
        positions = entry.positions
        for need, (vector, floating) in checks:
            total = floating
            for i in positions:
                total += vector[i]
            if total < need:
                return False
        return not (required and bandwidth_in(entry) is None)

    fallback: tuple[tuple[float, ...], int, CandidateMask] | None = None
    chosen: CandidateMask | None = None
    for size, masks in plan.by_width:
        best: tuple[tuple[float, ...], int, CandidateMask] | None = None
        for entry in masks:
            if not fits(entry):
                continue
            positions = entry.positions
            cover = entry.mask
            for provider, (vector, floating), subsets in zip(
                providers, amounts, entry.subsets, strict=True
            ):
                if not provider.narrow or provider.min_width >= size:
                    continue
                need = provider.resource.need
                part = 0
                if provider.min_width == 1:
                    for i in positions:
                        if floating + vector[i] >= need:
                            part |= candidate_bits[i]
                else:
                    for sub_mask, sub in subsets:
                        if floating + sum(vector[i] for i in sub) >= need:
                            part |= sub_mask
                cover &= part
                if not cover:
                    break
            if not cover and (
                not plan.admits_non_preferred
                or (fallback is not None and fallback[1].bit_count() < size)
            ):
                continue
            bandwidth = 0.0
            gpu_left = 0
            if gpus:
                bandwidth = bandwidth_in(entry) or 0.0
                gpu_left = (gpu_free & entry.gpu_bits).bit_count() - gpus
            cpu_left = 0
            if cpu_at >= 0:
                vector, _ = amounts[cpu_at]
                cpu_left = sum(vector[i] for i in positions) - cpu_need
            key = (entry.distance, -bandwidth, gpu_left, cpu_left)
            if cover:
                if best is None or (key, entry.mask) < best[:2]:
                    best = (key, entry.mask, entry)
            elif fallback is None or (key, entry.mask) < fallback[:2]:
                fallback = (key, entry.mask, entry)
        if best is not None:
            chosen = best[2]
            break
        if fallback is not None and size >= plan.preferred_bound:
            break
    if chosen is None and fallback is not None:
        chosen = fallback[2]
    if chosen is None and plan.every is not None and fits(plan.every):
        chosen = plan.every
    if chosen is None:
        # `gpu-links: required` names the unlinked pair when counts alone would fit.
        return None if required else explain_amounts(plan, amounts)
    return _score(plan, chosen, free, bandwidth_in(chosen) if gpus else 0.0)


def _score(
    plan: Plan, chosen: CandidateMask, free: FreeSignature, bandwidth: float | None
) -> int | None:
    """`scoring.placement_score` from the plan's integers (same terms, same order)."""
    if bandwidth is None:
        return None  # only `required` finds no set; the general path words why
    gpus = plan.gpus
    span = min(1.0, plan.min_width / len(chosen.positions))
    links = 1.0
    if gpus >= 2 and plan.best_bandwidth > 0:
        links = bandwidth / plan.best_bandwidth
    fills: list[float] = []
    if gpus and chosen.any_gpu_count:
        used = (chosen.any_gpu_bits & ~free.gpu_mask).bit_count() + gpus
        fills.append(min(1.0, used / chosen.any_gpu_count))
    cpus = plan.exclusive_cpus
    if cpus and chosen.cpu_capacity:
        capacity = chosen.cpu_capacity
        free_in_mask = (free.cpu_mask & chosen.cpu_bits).bit_count()
        fills.append(min(1.0, (capacity - free_in_mask + cpus) / capacity))
    return compose_score(span, links, fills, with_gpus=bool(gpus))


def explain_amounts(plan: Plan, amounts: Sequence[tuple[list[int], int]]) -> str:
    """`refusals.explain`'s text from the providers' free amounts, by the plan's template."""
    text = plan.refusal_text
    per_numa = "; ".join(
        f"NUMA {numa}: "
        + ", ".join(
            f"{format_bytes(amounts[k][0][i] if i >= 0 else 0)} {name}"
            if in_bytes
            else f"{amounts[k][0][i] if i >= 0 else 0} {name}"
            for k, i, in_bytes, name in cells
        )
        + " free"
        for numa, cells in text.rows
    )
    if text.floating:
        per_numa += (
            "; not NUMA-local: "
            + ", ".join(f"{amounts[k][1]} {name}" for k, name in text.floating)
            + " free"
        )
    return f"{text.prefix}({per_numa})"


def _reader(tables: Tables, resource: Resource, need: Need, candidates: list[int]) -> Reader:
    """How to read `resource`'s free amount per candidate NUMA node from a signature."""
    name = resource.name
    local = [n in resource.capacity for n in candidates]
    if name == "CPUs" and need.full_cores and need.cpu_mode is CpuMode.EXCLUSIVE:
        return _whole_core_reader(tables, candidates)
    if name == "CPUs":
        cpu_bits = [
            make_mask(tables.numa_allocatable[n]) if ok else 0
            for n, ok in zip(candidates, local, strict=True)
        ]
        return lambda free: ([(free.cpu_mask & b).bit_count() for b in cpu_bits], 0)
    if name == "memory":
        slots = [
            tables.numa_ids.index(n) if ok else -1 for n, ok in zip(candidates, local, strict=True)
        ]

        def memory(free: FreeSignature) -> tuple[list[int], int]:
            table = free.memory
            return ([max(table[s][1], 0) if s >= 0 else 0 for s in slots], 0)

        return memory
    if name.startswith("hugepages-"):
        size = name.removeprefix("hugepages-")
        wanted = [(n, size) if ok else None for n, ok in zip(candidates, local, strict=True)]

        def hugepages(free: FreeSignature) -> tuple[list[int], int]:
            table = {(n, s): a for n, s, a in free.hugepages}
            return ([max(table.get(k, 0), 0) if k else 0 for k in wanted], 0)

        return hugepages
    if name == "GPUs":
        ours = [g for g, r in tables.gpu_resource.items() if need.gpu_resource in (None, r)]
        per_numa = [make_mask(g for g in ours if tables.gpu_numa[g] == n) for n in candidates]
        floating = make_mask(g for g in ours if tables.gpu_numa[g] is None)
        return lambda free: (
            [(free.gpu_mask & b).bit_count() for b in per_numa],
            (free.gpu_mask & floating).bit_count(),
        )
    # NICs: a handful per node; count the free ones by where they sit.
    position = {n: i for i, n in enumerate(candidates)}
    slot = {
        nic: position.get(numa, -1) if numa is not None else -1
        for nic, numa in tables.nic_numa.items()
        if need.nic_resource in (None, tables.nic_resource[nic])
    }
    local_slots = len(candidates)

    def nics(free: FreeSignature) -> tuple[list[int], int]:
        counts = [0] * (local_slots + 1)  # the last slot (-1): off-NUMA
        for nic in free.nics:
            at = slot.get(nic)
            if at is not None:
                counts[at] += 1
        return counts[:local_slots], counts[local_slots]

    return nics


def _whole_core_reader(tables: Tables, candidates: list[int]) -> Reader:
    """Free threads of whole free cores per NUMA node (`smt: full-cores` counts only those).

    Cores are grouped by their threads' offsets from the first thread; within a group,
    bit t of AND over offsets d of (cpu_mask >> d) is set iff every thread of the core
    starting at t is free.
    """
    tpc = tables.threads_per_core
    groups: dict[tuple[int, tuple[int, ...]], int] = {}
    for threads in tables.core_threads.values():
        if len(threads) != tpc:
            continue
        first = threads[0]
        key = (tables.cpu_numa[first], tuple(t - first for t in threads[1:]))
        groups[key] = groups.get(key, 0) | 1 << first
    per_numa = [
        tuple((offsets, low) for (numa, offsets), low in groups.items() if numa == n)
        for n in candidates
    ]

    def whole_cores(free: FreeSignature) -> tuple[list[int], int]:
        cpus = free.cpu_mask
        counts = []
        for entries in per_numa:
            count = 0
            for offsets, low in entries:
                whole = cpus & low
                for offset in offsets:
                    whole &= cpus >> offset
                count += whole.bit_count()
            counts.append(count * tpc)
        return counts, 0

    return whole_cores
