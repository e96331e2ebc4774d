"""Packing: the expected GPU fragmentation of a node under a workload mix (FGD-style,
topology-aware), and the node rank that chooses between nodes.

After the idea of Weng et al., "Beware of Fragmentation" (USENIX ATC '23): a node's
fragmentation is the free GPU capacity a pod drawn from the workload could not use;
a scheduler puts each pod where that grows least. Here, per request shape of the mix
(`Shape`: whole GPUs and CPUs), the usable GPUs are those that copies of the shape can
take *aligned*, counted the way the engine places them:

  * a shape whose GPUs fit in one NUMA node of the hardware (k <= the most GPUs any
    NUMA node holds) is counted per NUMA node: sum over NUMA nodes of
    min(free GPUs // k, free CPUs // c) copies, each taking k GPUs. Four free GPUs
    split 2 + 2 over two NUMA nodes host no aligned 4-GPU copy; four on one do.
    NUMA nodes are where NVLink cliques sit on the hardware modelled (DGX-1's quads,
    PCIe switches); on an NVSwitch machine every set has the best bandwidth anyway.
  * a larger shape is counted node-wide: min(free GPUs // k, free CPUs // c).

fragmentation(node) = sum over shapes of weight x (free GPUs - k x copies), in GPUs:
the expected number of free GPUs stranded for the next pod. Counting copies, not
just "fits or not", also sees 3 free GPUs left for a 2-GPU mix as one GPU stranded.
Shapes no NUMA node or node of this hardware can ever host count all free GPUs as
stranded, as in FGD: putting small pods where the big ones cannot go anyway is cheap.

What the engine does not see is not counted: shared-pool CPUs (`cpu: numa`) and
memory are left out, GPU shares (fractional GPUs) are not modelled. Only exclusive
CPUs (integer requests) are booked per NUMA node.

The rank (`node_rank`) is what every node choice reads — kube-scheduler's prioritize
through the extender, `numatopo simulate`'s numatopo strategy — and is lexicographic:
alignment first (the score's span and link terms, 0..100 rounded), then packing in
[0, 1): the fill of the touched NUMA nodes (best fit, the score's pack term), and
between equal fills the logistic of minus the fragmentation growth under the mix
(`FILL_WEIGHT`). Weighing growth and fill alike was measured worse on a 100-node
sample of the default trace (first failure at 93.2 % of GPUs against first-fit's 94.2 %).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "MixError",
    "Shape",
    "WorkloadMix",
    "fragmentation",
    "node_rank",
    "pack_of_growth",
]

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

_BIG = 1 << 40

# The NUMA fill leads; fragmentation growth decides between equal fills (measured: with
# the two weighed alike, a 100-node trace sample first failed at 93.2 % vs first-fit's 94.2 %).
FILL_WEIGHT = 100.0
# Packing stays below one rank step, so it never outweighs alignment.
PACK_SPAN = 0.999


class MixError(ValueError):
    """A workload mix text is not `GPUSxCPUS:WEIGHT[,...]`."""


def cpu_bucket(cpus: int) -> int:
    """CPUs rounded up to 1, 2, 4, 8, then a multiple of 8: few shapes, a need never
    understated."""
    if cpus <= 0:
        return 0
    if cpus <= 8:
        return 1 << (cpus - 1).bit_length()
    return -(-cpus // 8) * 8


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """One kind of request: whole GPUs and CPUs (CPUs as `cpu_bucket` rounds them),
    exclusive (each copy books its CPUs) or from the NUMA node's shared pool (a copy
    needs that many free there, and books none)."""

    gpus: int
    cpus: int
    exclusive: bool = True

    @classmethod
    def of(cls, gpus: int, cpus: int, *, exclusive: bool = True) -> Shape:
        return cls(max(0, gpus), cpu_bucket(cpus), exclusive and cpus > 0)


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    """Request shapes with weights summing to 1 (only shapes with GPUs are kept)."""

    shapes: tuple[Shape, ...] = ()
    weights: tuple[float, ...] = ()

    @classmethod
    def of(cls, counts: Mapping[Shape, float]) -> WorkloadMix:
        kept = sorted((s, w) for s, w in counts.items() if s.gpus > 0 and w > 0)
        total = sum(w for _, w in kept)
        if not kept or total <= 0:
            return cls()
        return cls(tuple(s for s, _ in kept), tuple(w / total for _, w in kept))

    @classmethod
    def of_requests(cls, requests: Iterable[tuple[int, int, bool]]) -> WorkloadMix:
        """The mix of (GPUs, CPUs, exclusive) requests, each weighed by its GPUs."""
        counts: dict[Shape, float] = {}
        for gpus, cpus, exclusive in requests:
            shape = Shape.of(gpus, cpus, exclusive=exclusive)
            counts[shape] = counts.get(shape, 0.0) + weigh(shape)
        return cls.of(counts)

    @classmethod
    def parse(cls, text: str) -> WorkloadMix:
        """`GPUSxCPUS[p]:WEIGHT` items, comma-separated (`1x8:60,8x64p:40`; `p`: CPUs
        from the shared pool, not exclusive); '' is no mix. Weights as given."""
        counts: dict[Shape, float] = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            shape_text, _, weight_text = item.partition(":")
            gpus_text, _, cpus_text = shape_text.strip().partition("x")
            pool = cpus_text.endswith("p")
            try:
                gpus, cpus = int(gpus_text), int(cpus_text.removesuffix("p") or "0")
                weight = float(weight_text or "1")
            except ValueError:
                raise MixError(f"workload mix item {item!r}: expected GPUSxCPUS:WEIGHT") from None
            if gpus < 0 or cpus < 0 or not weight >= 0 or math.isinf(weight):
                raise MixError(f"workload mix item {item!r}: negative or infinite value")
            shape = Shape.of(gpus, cpus, exclusive=not pool)
            counts[shape] = counts.get(shape, 0.0) + weight
        return cls.of(counts)

    def format(self) -> str:
        return ",".join(
            f"{s.gpus}x{s.cpus}{'' if s.exclusive or not s.cpus else 'p'}:{w:.4g}"
            for s, w in zip(self.shapes, self.weights, strict=True)
        )

    def __bool__(self) -> bool:
        return bool(self.shapes)


def weigh(shape: Shape) -> float:
    """A request's weight in a learned mix: its GPUs (the mix is where GPUs go)."""
    return float(shape.gpus)


def fragmentation(gpus: Ints, cpus: Ints, numa_gpu_capacity: int, mix: WorkloadMix) -> Floats:
    """Expected stranded free GPUs per row (see the module docstring).

    `gpus`, `cpus`: (rows x NUMA positions) free whole GPUs and free exclusive CPUs;
    `numa_gpu_capacity`: the most GPUs one NUMA node of this hardware holds. One array
    expression over (rows x positions x shapes).
    """
    k, c, exclusive, weights = _arrays(mix)
    total = gpus.sum(axis=1)
    if not k.size:
        return np.zeros(gpus.shape[0], dtype=np.float64)
    aligned = k <= numa_gpu_capacity
    per_numa = _copies(gpus[:, :, None], cpus[:, :, None], k, c, exclusive).sum(axis=1)
    per_node = _copies(total[:, None], cpus.sum(axis=1)[:, None], k, c, exclusive)
    copies = np.where(aligned, per_numa, per_node)
    return np.asarray(total * weights.sum() - (copies * k) @ weights, dtype=np.float64)


def _copies(gpus: Ints, cpus: Ints, k: Ints, c: Ints, exclusive: Bools) -> Ints:
    """Copies of each shape the free GPUs and CPUs hold (broadcast over the last axis)."""
    copies = gpus // k
    by_cpus = np.where(exclusive, cpus // np.maximum(c, 1), np.where(cpus >= c, _BIG, 0))
    return np.asarray(np.minimum(copies, np.where(c > 0, by_cpus, _BIG)), dtype=np.int64)


@functools.lru_cache(maxsize=64)
def _arrays(mix: WorkloadMix) -> tuple[Ints, Ints, Bools, Floats]:
    return (
        np.array([s.gpus for s in mix.shapes], dtype=np.int64),
        np.array([s.cpus for s in mix.shapes], dtype=np.int64),
        np.array([s.exclusive for s in mix.shapes], dtype=bool),
        np.array(mix.weights, dtype=np.float64),
    )


def pack_of_growth(growth: Floats, fill: Floats) -> Floats:
    """Packing in [0, 1): a fuller touched NUMA node first, then less fragmentation growth."""
    logistic = 0.5 * (1.0 - np.tanh(0.5 * growth))  # 1 / (1 + e^growth), without overflow
    return (logistic + FILL_WEIGHT * fill) / (1.0 + FILL_WEIGHT)


def node_rank(alignment: Floats, pack: Floats) -> Floats:
    """The rank: alignment (0..1) in whole steps of 1/100, then packing (0..1) below a step."""
    return np.rint(100.0 * alignment) + PACK_SPAN * np.clip(pack, 0.0, 1.0)
