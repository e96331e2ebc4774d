"""The workload mix the node rank packs for: a decayed histogram of the request shapes
(whole GPUs, CPUs) of the GPU pods seen (pure). Each pod counts once, when first seen,
weighted by its GPUs and by 2^(age / half-life) so old requests fade; nothing is persisted
(a list shows every live pod again). `NUMATOPO_WORKLOAD_MIX` pins it (`WorkloadMix.parse`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from numatopo_engine import pod_request
from numatopo_engine.annotations import CpuMode
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.packing import Shape, WorkloadMix, weigh
from numatopo_engine.resources import ResourceNames
from numatopo_operator.pod_view import PodView
from numatopo_operator.translate import RawPod

# Counted pods' keys kept at most (past it the oldest go: counted again, only refreshed).
SEEN_LIMIT = 100_000
# Weights are kept relative to a reference time moved forward before 2^age overflows.
_REBASE_AFTER = 512.0


def shape_of_pod(pod: RawPod, resources: ResourceNames) -> Shape | None:
    """The pod's request shape, or None for pods without whole GPUs (or unreadable)."""
    if not pod_request.wants_topology(pod):
        return None
    try:
        request = PodView.of(pod).request(resources)
    except InvalidRequestError:
        return None
    gpus = sum(c.gpus for c in request.containers)
    if gpus <= 0:
        return None
    cpus = -(-sum(c.cpu_milli for c in request.containers) // 1000)
    return Shape.of(gpus, cpus, exclusive=request.options.cpu is CpuMode.EXCLUSIVE)


class MixLearner:
    """Decayed histogram of request shapes; `mix()` is what the extender ranks with."""

    def __init__(
        self,
        half_life_seconds: float,
        *,
        pinned: WorkloadMix | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.half_life = half_life_seconds
        self.pinned = pinned if pinned else None
        self.clock = clock
        self.reference = clock()
        self.weights: dict[Shape, float] = {}
        self.seen: dict[str, None] = {}
        self._mix: WorkloadMix | None = None

    def observe(self, key: str, shape: Shape | None) -> None:
        """Count pod `key` (once) with its shape; None (no whole GPUs) counts nothing."""
        if shape is None or key in self.seen or self.pinned is not None:
            return
        self.seen[key] = None
        if len(self.seen) > SEEN_LIMIT:
            del self.seen[next(iter(self.seen))]
        exponent = (self.clock() - self.reference) / self.half_life
        if exponent > _REBASE_AFTER:
            self._rebase(exponent)
            exponent = 0.0
        self.weights[shape] = self.weights.get(shape, 0.0) + weigh(shape) * 2.0**exponent
        self._mix = None

    def observe_pod(self, key: str, pod: RawPod, resources: ResourceNames) -> None:
        """`observe` a live pod (its shape read only the first time it is seen)."""
        if key not in self.seen and self.pinned is None:
            self.observe(key, shape_of_pod(pod, resources))

    def forget(self, key: str) -> None:
        """A pod gone: counted again if it comes back (its weight stays, fading)."""
        self.seen.pop(key, None)

    def _rebase(self, exponent: float) -> None:
        scale = 2.0**-exponent
        self.weights = {s: w * scale for s, w in self.weights.items() if w * scale > 1e-300}
        self.reference = self.clock()

    def mix(self) -> WorkloadMix:
        """The pinned mix, else the learned one (empty before any GPU pod is seen)."""
        if self.pinned is not None:
            return self.pinned
        if self._mix is None:
            self._mix = WorkloadMix.of(self.weights)
        return self._mix
