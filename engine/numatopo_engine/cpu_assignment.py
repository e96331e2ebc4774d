"""Choosing exclusive CPUs inside the chosen NUMA mask (kubelet `takeByTopologyNUMAPacked` style).

An accumulator takes, while the request is at least that big:

1. whole NUMA nodes (every allocatable CPU of the node free), lowest id first;
2. whole sockets, likewise;
3. whole physical cores (every thread free), packed: NUMA nodes that can hold the rest of the
   request on their own first, smallest first (best fit), then the others largest first (fewest
   nodes touched); cores by id within a node;
4. single threads, only with `smt: any`: threads of partly used cores first (never breaking a
   whole core it does not need), in the same NUMA order, by id.

With `smt: full-cores` only step 1-3 apply, to cores whose every thread is free, and the request
must be a multiple of the threads per core (checked by the caller, who can say why). All ties go to
the lowest id, so the result is deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Iterable

from numatopo_engine.topology_tables import Tables

Take = Callable[[Iterable[int]], None]


def free_whole_core_cpus(tables: Tables, free: set[int], numa_ids: Container[int]) -> set[int]:
    """Threads of the cores in `numa_ids` whose every thread is allocatable and free."""
    out: set[int] = set()
    tpc = tables.threads_per_core
    for core in tables.whole_cores:
        threads = tables.core_threads[core]
        if (
            len(threads) == tpc
            and tables.cpu_numa[threads[0]] in numa_ids
            and all(t in free for t in threads)
        ):
            out.update(threads)
    return out


def take_cpus(
    tables: Tables, free: set[int], numa_ids: Iterable[int], count: int, *, full_cores: bool
) -> list[int] | None:
    """`count` CPUs from `free` inside `numa_ids`, ascending; None when they do not fit."""
    numa_set = set(numa_ids)
    if full_cores:
        pool = free_whole_core_cpus(tables, free, numa_set)
    else:
        pool = {c for c in free if tables.cpu_numa[c] in numa_set}
    if len(pool) < count:
        return None
    taken: list[int] = []

    def take(cpus: Iterable[int]) -> None:
        for cpu in cpus:
            taken.append(cpu)
            pool.discard(cpu)

    for numa_id in sorted(numa_set):
        whole = tables.numa_allocatable.get(numa_id, frozenset())
        if whole and len(whole) <= count - len(taken) and whole <= pool:
            take(sorted(whole))
    for socket_id in sorted(tables.socket_allocatable):
        whole = tables.socket_allocatable[socket_id]
        if len(whole) <= count - len(taken) and whole <= pool:
            take(sorted(whole))
    if len(taken) < count:
        _take_cores(tables, pool, count - len(taken), take)
    if len(taken) < count and not full_cores:
        _take_threads(tables, pool, count - len(taken), take)
    if len(taken) < count:
        return None
    return sorted(taken)


def _numa_order(available: dict[int, int], remaining: int) -> dict[int, int]:
    def key(n: int) -> tuple[bool, int, int]:
        fits = available[n] >= remaining
        return (not fits, available[n] if fits else -available[n], n)

    return {numa_id: rank for rank, numa_id in enumerate(sorted(available, key=key))}


def _take_cores(tables: Tables, pool: set[int], remaining: int, take: Take) -> None:
    # `pool` holds CPUs of the mask only, so these cores are the mask's.
    cores = [c for c in tables.whole_cores if all(t in pool for t in tables.core_threads[c])]
    available: Counter[int] = Counter()
    for core in cores:
        available[tables.cpu_numa[tables.core_threads[core][0]]] += len(tables.core_threads[core])
    order = _numa_order(available, remaining)
    cores.sort(key=lambda c: (order[tables.cpu_numa[tables.core_threads[c][0]]], c))
    for core in cores:
        threads = tables.core_threads[core]
        if len(threads) <= remaining:
            take(threads)
            remaining -= len(threads)
        if not remaining:
            return


def _take_threads(tables: Tables, pool: set[int], remaining: int, take: Take) -> None:
    available = Counter(tables.cpu_numa[cpu] for cpu in pool)
    free_on_core = Counter(tables.cpu_core[cpu] for cpu in pool)
    order = _numa_order(available, remaining)
    ranked = sorted(
        pool,
        key=lambda c: (
            order[tables.cpu_numa[c]],
            free_on_core[tables.cpu_core[c]],
            tables.cpu_core[c],
            c,
        ),
    )
    take(ranked[:remaining])
