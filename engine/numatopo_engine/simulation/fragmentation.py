"""GPU fragmentation of a node, measured against the workload's GPU requests (FGD-style).

After Weng et al., "Beware of Fragmentation" (USENIX ATC '23): a node's fragmentation for one
request type is the GPU share on it that this type could not use, either all of the node's free GPU
share (the type does not fit: too few CPUs, too little memory, too few whole GPUs, no GPU with
enough share left) or, when it fits, the share on GPUs too depleted to serve it (a partly used GPU
for a whole-GPU request; a GPU with less than `gpu_milli` left for a shared one). The node's
fragmentation is the weighted sum over the types; a scheduler places each pod where that sum grows
least.

Weights. FGD weighs a type by its popularity in the workload. Here that popularity is divided by how
many nodes can host the type right now, rounded down to a power of two: losing the last few nodes
able to run a rare large request (an 8-GPU pod with 120 CPUs fits only on the biggest boxes) strands
more than losing one of hundreds of nodes a 1-GPU pod fits on. The power-of-two rounding keeps the
weights, and so the cached node values, unchanged until a host count halves or doubles.

Requests without GPUs never use a GPU, so every free GPU is a fragment to them on every node; they
change no comparison between nodes and are left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from numatopo_engine.numamask import bits
from numatopo_engine.simulation.cluster import Cluster, SimNode, tightest_share
from numatopo_engine.simulation.trace import GPU_MILLI, PodRow

State = tuple[int, int, tuple[int, ...]]  # free CPU milli, free memory MiB, free share per GPU


@dataclass(frozen=True, slots=True)
class RequestType:
    """One kind of GPU request: CPUs and memory, and whole GPUs or one GPU's share."""

    cpu_milli: int
    memory_mib: int
    whole_gpus: int
    shared_milli: int  # > 0: a share of one GPU; 0: `whole_gpus` whole GPUs

    @classmethod
    def of(cls, pod: PodRow) -> RequestType:
        shared = pod.gpu_milli if pod.fractional else 0
        return cls(pod.cpu_milli, pod.memory_mib, pod.whole_gpus, shared)

    def fits(self, state: State) -> bool:
        cpu, memory, gpus = state
        if self.cpu_milli > cpu or self.memory_mib > memory:
            return False
        if self.shared_milli:
            return any(free >= self.shared_milli for free in gpus)
        return sum(1 for free in gpus if free == GPU_MILLI) >= self.whole_gpus


def _unusable(types: Sequence[RequestType], weights: Sequence[float], state: State) -> float:
    """Sum of weight x unusable GPU milli over `types` (one pass over the node's GPUs)."""
    cpu, memory, gpus = state
    total = sum(gpus)
    whole = sum(1 for free in gpus if free == GPU_MILLI)
    partial = total - whole * GPU_MILLI
    most = max(gpus, default=0)
    out = 0.0
    for weight, kind in zip(weights, types, strict=True):
        share = kind.shared_milli
        if kind.cpu_milli > cpu or kind.memory_mib > memory:
            out += weight * total
        elif share:
            out += weight * (total if most < share else sum(f for f in gpus if f < share))
        else:
            out += weight * (total if whole < kind.whole_gpus else partial)
    return out


def node_state(node: SimNode) -> State:
    return (node.free_cpu_milli, node.free_memory_mib, tuple(node.gpu_free))


def state_after(state: State, pod: PodRow) -> State:
    """A node's state once `pod` is placed there: a share on the tightest GPU that holds it, whole
    GPUs the first free ones (on counts every free whole GPU is alike)."""
    cpu, memory, gpus = state
    free = list(gpus)
    if pod.fractional:
        free[tightest_share(gpus, pod.gpu_milli)] -= pod.gpu_milli
    else:
        whole = [i for i, milli in enumerate(gpus) if milli == GPU_MILLI]
        for gpu in whole[: pod.whole_gpus]:
            free[gpu] = 0
    return (cpu - pod.cpu_milli, memory - pod.memory_mib, tuple(free))


class Fragmentation:
    """Fragmentation of the cluster's nodes against a workload's GPU request types; `booked` after
    every placement keeps the weights' host counts current."""

    def __init__(self, workload: Sequence[PodRow], cluster: Cluster) -> None:
        popularity = Counter(RequestType.of(p) for p in workload if p.total_gpu_milli > 0)
        self.types = sorted(popularity, key=lambda t: (t.whole_gpus, t.shared_milli, t.cpu_milli))
        self.popularity = [popularity[t] for t in self.types]
        self.hosts = [0] * len(self.types)
        self.states = [node_state(n) for n in cluster.nodes]
        self.node_fits = [self._fit_mask(state) for state in self.states]
        for mask in self.node_fits:
            self._count(mask, +1)
        self.weights: list[float] = []
        self._levels: list[int] = []
        self._cache: dict[State, float] = {}
        self._reweigh()

    def _fit_mask(self, state: State) -> int:
        return sum(1 << bit for bit, kind in enumerate(self.types) if kind.fits(state))

    def _count(self, mask: int, step: int) -> None:
        for bit in bits(mask):
            self.hosts[bit] += step

    def _reweigh(self) -> None:
        self._levels = [max(h, 1).bit_length() - 1 for h in self.hosts]
        total = sum(self.popularity) or 1
        self.weights = [
            p / total / (1 << level) for p, level in zip(self.popularity, self._levels, strict=True)
        ]
        self._cache.clear()

    def booked(self, cluster: Cluster, index: int) -> None:
        """Node `index` changed: update which types it can host, and the weights if needed."""
        self.states[index] = node_state(cluster.nodes[index])
        mask = self._fit_mask(self.states[index])
        old = self.node_fits[index]
        if mask == old:
            return
        self._count(old & ~mask, -1)
        self._count(mask & ~old, +1)
        self.node_fits[index] = mask
        levels = [max(h, 1).bit_length() - 1 for h in self.hosts]
        if levels != self._levels:
            self._reweigh()

    def of_state(self, state: State) -> float:
        """Expected GPU milli unusable by the next GPU request, on a node in `state`."""
        cached = self._cache.get(state)
        if cached is None:
            cached = self._cache[state] = _unusable(self.types, self.weights, state)
        return cached

    def growth(self, candidates: Sequence[int], pod: PodRow) -> dict[int, float]:
        """By node index: how much placing `pod` there adds to the node's fragmentation (nodes in
        one state judged once)."""
        states = {self.states[index] for index in candidates}
        grown = {
            state: self.of_state(state_after(state, pod)) - self.of_state(state) for state in states
        }
        return {index: grown[self.states[index]] for index in candidates}
