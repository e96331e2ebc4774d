"""The engine equals a plain brute-force search on nodes up to 8 NUMA nodes / 16 GPUs.

The brute force tries every subset of NUMA nodes, keeps those that fit from what is
free, marks a subset preferred when each resource has a hint as narrow as the hardware
allows inside it and those hints share a node (the kubelet's merged-hint rule), and
picks by: preferred first, NUMA width, mean distance, GPU link bandwidth, then packing
(fewest free GPUs, then CPUs, left in the subset), then the lowest mask. GPUs inside are
the set with the most bandwidth, then the smallest cut to the other free GPUs, then ids.
"""

from __future__ import annotations

import random
from itertools import combinations

import pytest
from helpers import app, busy, pod, small_node

from numatopo_engine.allocation import allocate
from numatopo_engine.annotations import PolicyName
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import NumatopologySpec
from numatopo_engine.state import NodeState


def _bandwidth(spec: NumatopologySpec) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for link in spec.gpu_links:
        out[(link.a, link.b)] = out[(link.b, link.a)] = link.bandwidth_g_bps
    return out


def _best_gpus(
    spec: NumatopologySpec, free: list[int], count: int
) -> tuple[float, tuple[int, ...]] | None:
    bw = _bandwidth(spec)
    best = None
    for chosen in combinations(sorted(free), count):
        inner = sum(bw.get(p, 0.0) for p in combinations(chosen, 2))
        cut = sum(bw.get((a, b), 0.0) for a in chosen for b in free if b not in chosen)
        key = (-inner, cut, chosen)
        if best is None or key < best:
            best = key
    return None if best is None else (-best[0], best[2])


def brute_force(
    spec: NumatopologySpec, state: NodeState, cpus: int, gpus: int, policy: PolicyName
) -> tuple[list[int], list[int]] | None:
    ids = [n.id for n in spec.numa_nodes]
    free_cpus = {n: len(spec.numa_node(n).cpus & state.free_cpus()) for n in ids}
    all_cpus = {n: len(spec.numa_node(n).cpus) for n in ids}
    free_gpus = {
        n: sorted(g.index for g in spec.gpus if g.numa == n and g.index in state.free_gpus())
        for n in ids
    }
    all_gpus = {n: sum(1 for g in spec.gpus if g.numa == n) for n in ids}
    wanted = [
        (cpus, free_cpus, all_cpus),
        (gpus, {n: len(v) for n, v in free_gpus.items()}, all_gpus),
    ]
    wanted = [w for w in wanted if w[0]]
    # The kubelet never empties its shared pool: without an online reserved CPU, exclusive
    # CPUs must leave one allocatable CPU free on the node, whatever the subset.
    keeps_pool = bool(spec.reserved_cpus.ids & spec.online_cpus().ids)
    if cpus and not keeps_pool and sum(free_cpus.values()) - cpus < 1:
        return None
    subsets = [s for k in range(1, len(ids) + 1) for s in combinations(ids, k)]

    def fits(subset: tuple[int, ...], need: int, amounts: dict[int, int]) -> bool:
        return sum(amounts[n] for n in subset) >= need

    def narrowest(need: int, capacity: dict[int, int]) -> int:
        return min((len(s) for s in subsets if fits(s, need, capacity)), default=99)

    def preferred(subset: tuple[int, ...]) -> bool:
        options = []
        for need, free, capacity in wanted:
            width = narrowest(need, capacity)
            options.append([set(h) for h in combinations(subset, width) if fits(h, need, free)])
        return any(set.intersection(*chosen) for chosen in _product(options))

    def distance(subset: tuple[int, ...]) -> float:
        pairs = [(a, b) for a in subset for b in subset if a != b]
        if not pairs:
            return 10.0
        return sum(spec.numa_node(a).distances[str(b)] for a, b in pairs) / len(pairs)

    def key(subset: tuple[int, ...]) -> tuple[float, ...]:
        in_subset = [g for n in subset for g in free_gpus[n]]
        bandwidth = _best_gpus(spec, in_subset, gpus)[0] if gpus else 0.0  # type: ignore[index]
        gpu_left = len(in_subset) - gpus if gpus else 0
        cpu_left = sum(free_cpus[n] for n in subset) - cpus if cpus else 0
        mask = sum(1 << n for n in subset)
        return (len(subset), distance(subset), -bandwidth, gpu_left, cpu_left, mask)

    width_bound = 1 if policy is PolicyName.SINGLE_NUMA_NODE else 8
    feasible = [
        s for s in subsets
        if len(s) <= width_bound and all(fits(s, need, free) for need, free, _ in wanted)
    ]  # fmt: skip
    candidates = [s for s in feasible if preferred(s)]
    if not candidates and policy in (PolicyName.BEST_EFFORT, PolicyName.NONE):
        candidates = feasible
    if not candidates:
        return None
    best = min(candidates, key=key)
    chosen = _best_gpus(spec, [g for n in best for g in free_gpus[n]], gpus) if gpus else None
    return list(best), list(chosen[1]) if chosen else []


def _product(options: list[list[set[int]]]) -> list[list[set[int]]]:
    out: list[list[set[int]]] = [[]]
    for choices in options:
        out = [[*done, c] for done in out for c in choices]
    return out


def _case(seed: int) -> tuple[NumatopologySpec, NodeState, int, int, PolicyName]:
    rng = random.Random(seed)
    numa = rng.choice([1, 2, 2, 3, 4, 4, 8])
    per_numa = rng.choice([1, 2]) if numa == 8 else rng.choice([1, 2, 4])
    gpu_count = numa * per_numa
    links = [
        (a, b, rng.choice([25.0, 50.0, 100.0]))
        for a, b in combinations(range(gpu_count), 2)
        if rng.random() < 0.5
    ]
    spec = small_node(numa=numa, cores=2, threads=2, gpus_per_numa=per_numa, links=links)
    held_gpus = tuple(g for g in range(gpu_count) if rng.random() < 0.3)
    held_cpus = ",".join(str(c) for c in range(numa * 4) if rng.random() < 0.3)
    state = busy(spec, gpus=held_gpus, cpus=held_cpus)
    cpus = rng.choice([0, 1, 2, 4, 6])
    gpus = rng.choice([1, 1, 2, 3, 4])
    policy = rng.choice(list(PolicyName))
    return spec, state, cpus, gpus, policy


@pytest.mark.parametrize("seed", range(300))
def test_engine_equals_brute_force(seed: int) -> None:
    spec, state, cpus, gpus, policy = _case(seed)
    expected = brute_force(spec, state, cpus, gpus, policy)
    try:
        decision = allocate(spec, state, pod(app(cpus, gpus), policy=policy), "n")
        actual = (decision.assignment.numa_nodes, decision.assignment.containers["app"].gpu_indices)
    except UnsatisfiableError:
        actual = None

    assert expected == actual
