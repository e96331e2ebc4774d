"""Placement strategies compared by `numatopo simulate`.

Count-only (a default cluster: kube-scheduler on counts, kubelet policy `none`, so the device plugin
hands out any free GPUs and CPUs come from the shared pool spanning every NUMA node):
  random        a random node that fits (FGD's Random)
  first-fit     the first node, in node-list order, that fits
  best-fit      FGD's BestFit score (free CPU and GPU left after placing, 50/50), ties broken
                at random as kube-scheduler does
Topology-aware:
  volcano-numa  Volcano numaaware-style: the node where CPUs + GPUs fit in the fewest NUMA
                nodes (then best-fit); GPUs taken in that NUMA set, no link choice
  kubelet-restricted / kubelet-single-numa
                best-fit node choice, then the kubelet Topology Manager's admission there; a
                pod it cannot align counts as an admission failure
  numatopo      whole-GPU pods: the production node rank (`rank_nodes`) of the nodes that
                pass the count filter; other pods (GPU shares, CPU-only): a partly used node
                before an untouched one, then the least fragmentation growth, then node-list
                order, keeping untouched nodes for the largest requests

Whole CPUs are exclusive only for pods whose CPU request is an integer (the static CPU manager's
rule); other pods run on the shared pool. Fractional-GPU pods share a GPU (best fit on the GPU's
free share) in every strategy, with no topology claimed: the engine does not model GPU sharing.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product

import numpy as np
import numpy.typing as npt

from numatopo_engine.allocation import Engine, allocate, mix_hosts, score_many
from numatopo_engine.annotations import Assignment, CpuMode, GpuLinksMode, PolicyName
from numatopo_engine.numamask import bits, sort_key, width
from numatopo_engine.packing import WorkloadMix
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.simulation.cluster import Cluster, SimNode, tightest_share
from numatopo_engine.simulation.fragmentation import Fragmentation
from numatopo_engine.simulation.trace import MIB, PodRow
from numatopo_engine.state import NodeState


@dataclass(frozen=True, slots=True)
class Placement:
    node: int
    gpus: tuple[int, ...]
    cpu_numas: frozenset[int]  # NUMA nodes the pod's CPUs run on
    exclusive_cpus: Mapping[int, int] = field(default_factory=dict)
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class Rejection:
    admission: bool  # True: the node was chosen, then the kubelet refused the pod
    reason: str


Outcome = Placement | Rejection


def exclusive_need(pod: PodRow) -> int:
    return pod.cpu_milli // 1000 if pod.cpu_milli > 0 and pod.cpu_milli % 1000 == 0 else 0


def _all_numas(node: SimNode) -> frozenset[int]:
    return frozenset(range(len(node.numa_free_cpus)))


def _take_cpus(node: SimNode, mask: int, need: int) -> dict[int, int]:
    """`need` exclusive CPUs: from the NUMA nodes of `mask` first (fullest first), then others, as
    the CPU manager does when the merged hint is narrower than the need."""
    free = node.numa_free_cpus
    taken: dict[int, int] = {}
    for numa in sorted(range(len(free)), key=lambda n: (not mask >> n & 1, -free[n])):
        take = min(need, node.numa_free_cpus[numa])
        if take:
            taken[numa] = take
            need -= take
    return taken


def _aligned(
    node_index: int, node: SimNode, pod: PodRow, mask: int, rng: random.Random
) -> Placement:
    """GPUs (any, no link choice) and exclusive CPUs taken inside `mask`."""
    numas = set(bits(mask))
    if pod.fractional:
        gpus: tuple[int, ...] = (tightest_share(node.gpu_free, pod.gpu_milli),)
    else:
        free = node.free_whole_gpus()
        inside = [g for g in free if node.shape.links.gpu_numa[g] in numas]
        outside = [g for g in free if node.shape.links.gpu_numa[g] not in numas]
        k = pod.whole_gpus
        picked = rng.sample(inside, min(k, len(inside)))
        picked += rng.sample(outside, k - len(picked))
        gpus = tuple(sorted(picked))
    need = exclusive_need(pod)
    if not need:
        return Placement(node_index, gpus, _all_numas(node))
    taken = _take_cpus(node, mask, need)
    return Placement(node_index, gpus, frozenset(taken), taken)


def _masks(node: SimNode) -> list[int]:
    count = len(node.numa_free_cpus)
    return sorted(range(1, 1 << count), key=sort_key)


def _fits_in(node: SimNode, pod: PodRow, mask: int) -> bool:
    numas = set(bits(mask))
    if pod.whole_gpus:
        free = sum(1 for g in node.free_whole_gpus() if node.shape.links.gpu_numa[g] in numas)
        if free < pod.whole_gpus:
            return False
    need = exclusive_need(pod)
    return not need or sum(node.numa_free_cpus[n] for n in numas) >= need


def _provider_hints(node: SimNode, pod: PodRow) -> list[list[tuple[int, bool]]]:
    """The kubelet's per-resource hints: (mask, preferred) for GPUs and exclusive CPUs."""
    links, masks = node.shape.links, _masks(node)

    def per_numa(gpus: Iterable[int]) -> list[int]:
        counts = Counter(links.gpu_numa[g] for g in gpus)
        return [counts[n] for n in range(len(node.numa_free_cpus))]

    def held(mask: int, counts: Sequence[int]) -> int:
        return sum(counts[n] for n in bits(mask))

    providers: list[list[tuple[int, bool]]] = []
    for need, hardware, free in (
        (pod.whole_gpus, per_numa(range(links.gpu_count)), per_numa(node.free_whole_gpus())),
        (exclusive_need(pod), node.shape.numa_cpus, node.numa_free_cpus),
    ):
        if need:
            narrowest = min((width(m) for m in masks if held(m, hardware) >= need), default=0)
            providers.append([(m, width(m) == narrowest) for m in masks if held(m, free) >= need])
    return providers


def merge_hints(
    providers: list[list[tuple[int, bool]]], all_mask: int, *, single_numa: bool
) -> tuple[int, bool] | None:
    """The kubelet's hint merge: best AND of one hint per provider; None if nothing aligns."""
    if single_numa:
        providers = [[h for h in hints if h[1] and width(h[0]) == 1] for hints in providers]
    if not providers:
        return (all_mask, True)
    best: tuple[int, bool] | None = None
    for combo in product(*providers):
        mask = all_mask
        for hint_mask, _ in combo:
            mask &= hint_mask
        if not mask:
            continue
        preferred = all(p for _, p in combo)
        if best is None or (not preferred, *sort_key(mask)) < (not best[1], *sort_key(best[0])):
            best = (mask, preferred)
    return best


def engine_request(pod: PodRow, policy: PolicyName) -> PodRequest:
    """The pod as numatopo's annotations would ask for it."""
    container = ContainerRequest(
        name="main",
        cpu_milli=pod.cpu_milli,
        memory_bytes=pod.memory_mib * MIB,
        gpus=pod.whole_gpus,
        gpu_resource="nvidia.com/gpu",
    )
    # The annotation default: whole CPUs for integer requests, else the NUMA node's pool.
    cpu = CpuMode.EXCLUSIVE if exclusive_need(pod) else CpuMode.NUMA
    options = TopologyOptions(policy=policy, cpu=cpu, gpu_links=GpuLinksMode.PREFERRED)
    return PodRequest(namespace="simulate", name=pod.name, containers=(container,), options=options)


def trace_mix(workload: Sequence[PodRow]) -> WorkloadMix:
    """The workload's own mix of whole-GPU request shapes (GPUs, CPUs rounded up)."""
    return WorkloadMix.of_requests(
        (p.whole_gpus, -(-p.cpu_milli // 1000), bool(exclusive_need(p)))
        for p in workload
        if p.whole_gpus
    )


def rank_nodes(
    engine: Engine,
    cluster: Cluster,
    candidates: Sequence[int],
    request: PodRequest,
    mix: WorkloadMix,
) -> tuple[npt.NDArray[np.float64], str]:
    """The production node rank (`allocation.score_many(...).rank`) of each candidate, judged
    together as the extender's are, -1 where refused, and one refusal's reason."""
    nodes = cluster.nodes
    ranks = np.full(len(candidates), -1.0)
    groups: dict[str, tuple[SimNode, dict[bytes, list[int]]]] = {}
    by_shape: dict[str, list[NodeState]] = {}
    for position, index in enumerate(candidates):
        node = nodes[index]
        assert node.state is not None
        tables = engine.tables_of(node.state.topology, node.state)
        group = groups.setdefault(tables.key, (node, {}))
        group[1].setdefault(engine.row(tables, node.state), []).append(position)
        by_shape.setdefault(node.state.shape_key, []).append(node.state)
    hosts = mix_hosts(
        ((states[0].topology, states) for states in by_shape.values()), mix, engine=engine
    )
    reason = ""
    for first, by_row in groups.values():
        positions = list(by_row.values())
        states = [s for p in positions if (s := nodes[candidates[p[0]]].state) is not None]
        scored = score_many(
            states[0].topology, states, request,
            checked=False, engine=engine, mix=mix, hosts=hosts,
        )  # fmt: skip
        for same, rank in zip(positions, scored.rank.tolist(), strict=True):
            ranks[same] = rank
        if scored.refused and not reason:
            reason = f"{first.name}: {scored.refused[0][1]}"
    return ranks, reason


class Strategy:
    """Chooses a node (and the devices on it) for one pod, or says why not; `name` is its
    `STRATEGIES` name, `policy` the engine's (the numatopo strategy asks with it)."""

    def __init__(self, name: str, seed: int, policy: PolicyName) -> None:
        self.name = name
        self.rng = random.Random(seed)
        self.engine = Engine()
        self.policy = policy

    def start(self, cluster: Cluster, workload: Sequence[PodRow]) -> None:
        """Called once before the replay, with the fresh cluster and the whole workload."""

    def place(self, cluster: Cluster, pod: PodRow, candidates: list[int]) -> Outcome:
        raise NotImplementedError

    def booked(self, cluster: Cluster, placed: Placement) -> None:
        """Called after `placed` has been booked into `cluster`."""

    def best_fit_node(self, cluster: Cluster, pod: PodRow, candidates: list[int]) -> int:
        scores = [cluster.best_fit_score(i, pod) for i in candidates]
        top = max(scores)
        return self.rng.choice([i for i, s in zip(candidates, scores, strict=True) if s == top])


class CountOnly(Strategy):
    """The node by counts alone, then what the kubelet with policy `none` does on it."""

    def place(self, cluster: Cluster, pod: PodRow, candidates: list[int]) -> Outcome:
        if self.name == "random":
            index = self.rng.choice(candidates)
        elif self.name == "first-fit":
            index = candidates[0]
        else:
            index = self.best_fit_node(cluster, pod, candidates)
        node = cluster.nodes[index]
        if pod.fractional:
            gpus: tuple[int, ...] = (tightest_share(node.gpu_free, pod.gpu_milli),)
        else:
            gpus = tuple(sorted(self.rng.sample(node.free_whole_gpus(), pod.whole_gpus)))
        return Placement(index, gpus, _all_numas(node))


class VolcanoNuma(Strategy):
    def place(self, cluster: Cluster, pod: PodRow, candidates: list[int]) -> Outcome:
        ranked: list[tuple[int, int, int, int]] = []  # (NUMA nodes spanned, -best-fit, index, mask)
        for index in candidates:
            node = cluster.nodes[index]
            mask = next((m for m in _masks(node) if _fits_in(node, pod, m)), None)
            if mask is not None:
                ranked.append((width(mask), -cluster.best_fit_score(index, pod), index, mask))
        if not ranked:
            return Rejection(False, "no node has the GPUs and exclusive CPUs free")
        top = min(r[:2] for r in ranked)
        _, _, index, mask = self.rng.choice([r for r in ranked if r[:2] == top])
        return _aligned(index, cluster.nodes[index], pod, mask, self.rng)


class KubeletAdmission(Strategy):
    """Topology-blind best-fit, then the kubelet's Topology Manager admission."""

    def place(self, cluster: Cluster, pod: PodRow, candidates: list[int]) -> Outcome:
        index = self.best_fit_node(cluster, pod, candidates)
        node = cluster.nodes[index]
        all_mask = (1 << len(node.numa_free_cpus)) - 1
        single = self.name == "kubelet-single-numa"
        merged = merge_hints(_provider_hints(node, pod), all_mask, single_numa=single)
        if merged is None or not merged[1]:
            return Rejection(True, f"TopologyAffinityError on {node.name}")
        return _aligned(index, node, pod, merged[0], self.rng)


class Numatopo(Strategy):
    """The production node rank for whole-GPU pods, FGD on counts for the rest."""

    fragmentation: Fragmentation  # set by `start`, as `mix`
    mix: WorkloadMix

    def start(self, cluster: Cluster, workload: Sequence[PodRow]) -> None:
        # FGD's premise: the mix of requests is known from the cluster's history; the replayed
        # workload stands for it (in production the operator learns it).
        self.fragmentation = Fragmentation(workload, cluster)
        self.mix = trace_mix(workload)

    def booked(self, cluster: Cluster, placed: Placement) -> None:
        self.fragmentation.booked(cluster, placed.node)

    def place(self, cluster: Cluster, pod: PodRow, candidates: list[int]) -> Outcome:
        nodes = cluster.nodes
        if not pod.whole_gpus:
            growth = self.fragmentation.growth(candidates, pod)
            index = min(candidates, key=lambda i: (nodes[i].untouched(), growth[i], i))
            gpus = (tightest_share(nodes[index].gpu_free, pod.gpu_milli),) if pod.fractional else ()
            return Placement(index, gpus, _all_numas(nodes[index]))
        request = engine_request(pod, self.policy)
        ranks, reason = rank_nodes(self.engine, cluster, candidates, request, self.mix)
        best = int(np.argmax(ranks))
        if ranks[best] < 0:
            return Rejection(False, reason or "no node fits")
        index = candidates[best]
        node = nodes[index]
        assert node.state is not None
        decision = allocate(node.spec, node.state, request, node.name, engine=self.engine)
        return self._from_assignment(index, node, decision.assignment)

    def _from_assignment(self, index: int, node: SimNode, assignment: Assignment) -> Placement:
        spec = node.spec
        cpu_numa = {c.id: c.numa for c in spec.cpus if c.numa is not None}
        gpus: list[int] = []
        exclusive: Counter[int] = Counter()
        cpu_numas: set[int] = set()
        for container in assignment.containers.values():
            gpus.extend(container.gpu_indices)
            if container.exclusive and len(container.cpus):
                numas = [cpu_numa[cpu] for cpu in container.cpus]
                exclusive.update(numas)
                cpu_numas.update(numas)
            else:
                cpu_numas.update(container.mems.ids or assignment.numa_nodes)
        return Placement(index, tuple(sorted(gpus)), frozenset(cpu_numas), exclusive, assignment)


_KINDS: Mapping[str, type[Strategy]] = {
    "numatopo": Numatopo,
    "random": CountOnly,
    "first-fit": CountOnly,
    "best-fit": CountOnly,
    "volcano-numa": VolcanoNuma,
    "kubelet-restricted": KubeletAdmission,
    "kubelet-single-numa": KubeletAdmission,
}
STRATEGIES = tuple(_KINDS)


def make_strategy(name: str, *, seed: int, policy: PolicyName = PolicyName.BEST_EFFORT) -> Strategy:
    """A fresh strategy with its own random stream, so each strategy replays the same way alone."""
    if name not in _KINDS:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    return _KINDS[name](name, seed, policy)
