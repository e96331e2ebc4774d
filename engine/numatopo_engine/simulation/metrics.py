"""Per-strategy metrics of one replay (the keys of `numatopo simulate -o json`, each defined in
docs/operations.md). Shares are fractions in [0, 1], null when there is nothing to divide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import comb

from numatopo_engine.simulation.cluster import Cluster
from numatopo_engine.simulation.strategies import Outcome, Placement
from numatopo_engine.simulation.trace import PodRow


def _share(part: float, whole: int) -> float | None:
    return part / whole if whole else None


def milliseconds(seconds: Sequence[float]) -> tuple[float, float]:
    """The mean and the 99th percentile of `seconds`, in ms (0 and 0 for none)."""
    if not seconds:
        return 0.0, 0.0
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return 1000 * sum(ordered) / len(ordered), 1000 * p99


@dataclass
class StrategyResult:
    strategy: str
    pods: int = 0
    placed: int = 0
    failed: int = 0
    admission_failures: int = 0
    first_failure_arrived_pct: float | None = None
    alloc_pct_at_first_failure: float = 0.0
    alloc_pct_final: float = 0.0
    whole_gpu_pods: int = 0
    multi_gpu_pods: int = 0
    fractional_gpu_pods: int = 0
    single_numa_share: float | None = None
    alignable_multi_gpu_pods: int = 0
    alignable_single_numa_share: float | None = None
    best_bandwidth_share: float | None = None
    mean_link_gbps: float | None = None
    cpu_gpu_colocated_share: float | None = None
    decision_ms_mean: float = 0.0
    decision_ms_p99: float = 0.0
    curve: list[list[float]] = field(default_factory=list)


class Recorder:
    """Accumulates one strategy's outcomes pod by pod."""

    def __init__(self, strategy: str, cluster: Cluster) -> None:
        self.result = StrategyResult(strategy)
        self.cluster = cluster
        self.total = cluster.total_gpu_milli or 1
        self.arrived_milli = 0
        self.points: list[tuple[int, int]] = []
        self.times: list[float] = []
        self.single = 0
        self.alignable_single = 0
        self.best_bw = 0
        self.link_gbps = 0.0
        self.colocated = 0

    def record(self, pod: PodRow, outcome: Outcome, seconds: float) -> None:
        r = self.result
        r.pods += 1
        self.arrived_milli += pod.total_gpu_milli
        self.times.append(seconds)
        if isinstance(outcome, Placement):
            r.placed += 1
            self._alignment(pod, outcome)
        else:
            r.failed += 1
            r.admission_failures += outcome.admission
            if r.first_failure_arrived_pct is None:
                r.first_failure_arrived_pct = 100 * self.arrived_milli / self.total
                r.alloc_pct_at_first_failure = 100 * self.cluster.used_gpu_milli / self.total
        self.points.append((self.arrived_milli, self.cluster.used_gpu_milli))

    def _alignment(self, pod: PodRow, placed: Placement) -> None:
        r = self.result
        if pod.fractional:
            r.fractional_gpu_pods += 1
            return
        k = pod.whole_gpus
        if not k:
            return
        links = self.cluster.nodes[placed.node].shape.links
        numas = {links.gpu_numa[g] for g in placed.gpus}
        r.whole_gpu_pods += 1
        self.colocated += placed.cpu_numas <= numas
        if k < 2:
            return
        r.multi_gpu_pods += 1
        self.single += len(numas) == 1
        if k <= links.max_gpus_per_numa:
            r.alignable_multi_gpu_pods += 1
            self.alignable_single += len(numas) == 1
        aggregate = links.aggregate(placed.gpus)
        self.best_bw += aggregate >= links.best_aggregate(k) - 1e-9
        self.link_gbps += aggregate / comb(k, 2)

    def finish(self) -> StrategyResult:
        r = self.result
        r.alloc_pct_final = 100 * self.cluster.used_gpu_milli / self.total
        if r.first_failure_arrived_pct is None:
            r.alloc_pct_at_first_failure = r.alloc_pct_final
        r.single_numa_share = _share(self.single, r.multi_gpu_pods)
        r.alignable_single_numa_share = _share(self.alignable_single, r.alignable_multi_gpu_pods)
        r.best_bandwidth_share = _share(self.best_bw, r.multi_gpu_pods)
        r.mean_link_gbps = _share(self.link_gbps, r.multi_gpu_pods)
        r.cpu_gpu_colocated_share = _share(self.colocated, r.whole_gpu_pods)
        r.decision_ms_mean, r.decision_ms_p99 = milliseconds(self.times)
        r.curve = _curve(self.points, self.total)
        return r


def _curve(points: list[tuple[int, int]], total: int) -> list[list[float]]:
    """Allocated % per integer arrived %: mean over the pods that round to it (FGD's analysis)."""
    buckets: dict[int, list[float]] = {}
    for arrived, used in points:
        buckets.setdefault(round(100 * arrived / total), []).append(100 * used / total)
    return [[float(pct), round(sum(v) / len(v), 3)] for pct, v in sorted(buckets.items())]
