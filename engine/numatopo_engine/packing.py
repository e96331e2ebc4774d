"""Packing: the expected GPU fragmentation of a node under a workload mix (FGD-style,
topology-aware), and the node rank that chooses between nodes (docs/DESIGN.md, "The allocation
engine", step 4; docs/packing.md, "The rank", for the measurements behind the weights).

After Weng et al., "Beware of Fragmentation" (USENIX ATC '23). Per request shape of the mix
(`Shape`: whole GPUs k and CPUs c) the usable GPUs are those copies of the shape can take *aligned*:
per NUMA node (sum of min(free GPUs // k, free CPUs // c)) when the shape fits one NUMA node of the
hardware (four free GPUs split 2 + 2 host no 4-GPU copy), node-wide otherwise.

fragmentation(node) = sum over shapes of weight x (free GPUs - k x copies): the expected free GPUs
stranded for the next pod (3 free GPUs under a 2-GPU mix strand one; shapes the hardware can never
host strand every free GPU, as in FGD). A shape's weight is its share x N / h, h of the N nodes
judged together able to host a copy now (`Hosts`), so the last hosts of a rare big shape cost more.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

_BIG = 1 << 40

GROWTH_WEIGHT = 3.0
# Packing stays below one rank step, so it never outweighs alignment.
PACK_SPAN = 0.999


class MixError(ValueError):
    """A workload mix text is not `GPUSxCPUS:WEIGHT[,...]`."""


def cpu_bucket(cpus: int) -> int:
    """CPUs rounded up to 1, 2, 4, 8, then a multiple of 8: few shapes, a need never understated."""
    if cpus <= 0:
        return 0
    if cpus <= 8:
        return 1 << (cpus - 1).bit_length()
    return -(-cpus // 8) * 8


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """One kind of request: whole GPUs and CPUs (`cpu_bucket`ed), exclusive or from the NUMA node's
    shared pool (a copy needs that many free there, and books none)."""

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
        """`GPUSxCPUS[p]:WEIGHT` items, comma-separated (`1x8:60,8x64p:40`; `p`: CPUs from the
        shared pool, not exclusive); '' is no mix. Weights as given."""
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


@dataclass(frozen=True, slots=True)
class Hosts:
    """How many of the `nodes` judged together can host each shape of `mix` now (`counts`)."""

    mix: WorkloadMix
    nodes: int
    counts: tuple[int, ...]

    def weights(self) -> Floats:
        """Per shape: its mix share times nodes / hosts (just the share where nothing hosts it)."""
        share = _arrays(self.mix)[3]
        hosts = np.array(self.counts, dtype=np.float64)
        scale = np.where(hosts > 0, self.nodes / np.maximum(hosts, 1.0), 1.0)
        return np.asarray(share * scale, dtype=np.float64)


def usable_gpus(
    gpus: Ints,
    cpus: Ints,
    numa_gpu_capacity: int,
    mix: WorkloadMix,
    *,
    numa_cpu_capacity: int | None = None,
) -> tuple[Ints, Ints]:
    """`fragmentation`'s weight-free terms, which depend on the row alone (kept while `Hosts`
    changes): per row its free GPUs, per (row, shape) the GPUs copies of the shape would use."""
    copies = shape_copies(gpus, cpus, numa_gpu_capacity, mix, numa_cpu_capacity=numa_cpu_capacity)
    return gpus.sum(axis=1), copies * _arrays(mix)[0]


def stranded(total: Ints, used: Ints, mix: WorkloadMix, weights: Floats | None = None) -> Floats:
    """`fragmentation` from `usable_gpus`' terms."""
    weights = _arrays(mix)[3] if weights is None else weights
    return np.asarray(total * weights.sum() - used @ weights, dtype=np.float64)


def shape_copies(
    gpus: Ints,
    cpus: Ints,
    numa_gpu_capacity: int,
    mix: WorkloadMix,
    *,
    numa_cpu_capacity: int | None = None,
) -> Ints:
    """(rows x shapes) copies of each shape of `mix` the free GPUs and CPUs hold aligned: per NUMA
    node where one NUMA node of this hardware holds the shape's GPUs (and CPUs, when
    `numa_cpu_capacity` is given), else node-wide."""
    k, c, exclusive, _ = _arrays(mix)
    aligned = k <= numa_gpu_capacity
    if numa_cpu_capacity is not None:
        aligned &= c <= numa_cpu_capacity
    per_numa = _copies(gpus[:, :, None], cpus[:, :, None], k, c, exclusive).sum(axis=1)
    per_node = _copies(gpus.sum(axis=1)[:, None], cpus.sum(axis=1)[:, None], k, c, exclusive)
    return np.asarray(np.where(aligned, per_numa, per_node), dtype=np.int64)


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
    """Packing in (0, 1): less growth (weighed `GROWTH_WEIGHT` to the touched NUMA node's fill),
    through a falling arctangent, which separates large growths (a logistic rounds them to 0)."""
    less = 0.5 - np.arctan(growth) / np.pi
    return np.asarray((GROWTH_WEIGHT * less + fill) / (1.0 + GROWTH_WEIGHT), dtype=np.float64)


def node_rank(alignment: Floats, pack: Floats) -> Floats:
    """The rank: alignment (0..1) in whole steps of 1/100, then packing (0..1) below a step."""
    return np.rint(100.0 * alignment) + PACK_SPAN * np.clip(pack, 0.0, 1.0)
