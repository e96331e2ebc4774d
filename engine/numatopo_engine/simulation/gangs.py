"""Multi-node jobs (gangs) arriving and leaving on a leaf/spine cluster, placed three ways.

Job sizes (GPUs per job) follow the GPU-demand CDF of SenseTime's Helios clusters: Hu et al.,
"Characterization and Prediction of Deep Learning Workloads in Large-Scale GPU Datacenters", SC '21,
the job GPU-demand CDF ("Fraction of Jobs (%)" over "GPU Number", one curve per cluster). The points
below were read off the vector paths of that figure as the authors' artifact draws it
(S-Lab-System-Group/HeliosArtifact, `analysis/3_job characterization/job_cdf_gpunum.pdf`, commit
bdaae10), at the x positions the artifact evaluates: 1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64 GPUs
and "> 64" (read as 128 GPUs here). A job's GPU count is the upper edge of the bucket its draw falls
in. GPU jobs only (the CDF counts jobs with at least one GPU).

A job of at most one node's GPUs is one pod; a larger one is ceil(GPUs / node GPUs) pods of a whole
node's GPUs each (multi-node training takes whole nodes), a group that must share one domain of
`required` (default: the spine level). Arrivals are a Poisson process, run times exponential with
mean 1; the arrival rate makes the offered load `load` x the cluster's GPUs. Jobs wait in one queue
in strict FIFO order (a gang scheduler's head-of-line: a big job is not starved by small ones behind
it); after every arrival and departure the head of the queue is placed while it fits.

Strategies (each on a fresh copy of the cluster, all with the engine's `allocate` per pod):
  numatopo        `place_group`: the narrowest domain that fits, the least domain
                  fragmentation, ranks along the tree
  required-only   the first domain of the required level (tree order) whose nodes hold the
                  group, nodes first-fit by name inside it: the constraint, nothing more
  blind           all or nothing, nodes first-fit by name over the whole cluster (node
                  names do not follow the network)

Group options (`GroupOptions`: a preferred level, a cap of members per domain of a level, slices of
n consecutive ranks) are declared by numatopo's multi-node jobs only; every strategy is measured on
them.

Measured: the keys of `numatopo simulate --multi-node -o json` (docs/operations.md).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from itertools import pairwise

from numatopo_engine.allocation import Engine
from numatopo_engine.annotations import Assignment, PolicyName
from numatopo_engine.domains import (
    DomainTree,
    Member,
    domain_fragmentation,
    first_fit,
    place_group,
)
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.groups import GroupSpec, Strategy
from numatopo_engine.network_topology import HOSTNAME_LABEL
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.simulation.leafspine import ClusterFile
from numatopo_engine.simulation.metrics import milliseconds

# Cumulative % of GPU jobs with at most this many GPUs (module docstring); 128 stands for "> 64".
HELIOS_GPU_CDF: Mapping[str, tuple[tuple[int, float], ...]] = {
    "venus": (
        (1, 51.8), (2, 57.4), (4, 64.8), (8, 90.0), (12, 90.0), (16, 94.1), (24, 95.0),
        (32, 97.8), (40, 98.0), (48, 98.3), (56, 98.5), (64, 98.7), (128, 100.0),
    ),
    "earth": (
        (1, 89.2), (2, 90.0), (4, 92.1), (8, 97.5), (12, 97.5), (16, 99.1), (24, 99.3),
        (32, 99.7), (40, 99.8), (48, 99.8), (56, 99.8), (64, 99.9), (128, 100.0),
    ),
    "saturn": (
        (1, 68.3), (2, 71.0), (4, 79.4), (8, 94.9), (12, 94.9), (16, 97.5), (24, 97.9),
        (32, 99.3), (40, 99.4), (48, 99.5), (56, 99.6), (64, 99.7), (128, 100.0),
    ),
    "uranus": (
        (1, 66.3), (2, 69.4), (4, 73.7), (8, 92.3), (12, 92.3), (16, 97.9), (24, 98.1),
        (32, 99.6), (40, 99.6), (48, 99.7), (56, 99.7), (64, 100.0), (128, 100.0),
    ),
}  # fmt: skip

NAMESPACE = "sim"

Clock = Callable[[], float]


@dataclass(frozen=True)
class GangJob:
    index: int
    gpus: int  # the job's GPUs
    pods: int
    gpus_per_pod: int
    arrival: float
    duration: float

    @property
    def name(self) -> str:
        return f"job-{self.index}"


def draw_jobs(
    count: int,
    *,
    cdf: Sequence[tuple[int, float]],
    node_gpus: int,
    cluster_gpus: int,
    load: float,
    seed: int,
) -> list[GangJob]:
    """`count` jobs (module docstring): sizes from `cdf`, Poisson arrivals, exponential run times of
    mean 1, arrival rate giving `load` x `cluster_gpus` of offered load."""
    if not cdf or cdf[-1][1] < 100.0:
        raise ValueError("the size CDF must end at 100 %")
    if node_gpus <= 0 or cluster_gpus <= 0 or not load > 0:
        raise ValueError("node GPUs, cluster GPUs and load must be positive")
    rng = random.Random(seed)
    previous = 0.0
    buckets: list[tuple[int, float]] = []
    for gpus, cumulative in cdf:
        if cumulative > previous:
            buckets.append((gpus, (cumulative - previous) / 100.0))
        previous = cumulative
    mean_gpus = sum(g * p for g, p in buckets)
    rate = load * cluster_gpus / mean_gpus  # jobs per unit time, run times of mean 1
    sizes = rng.choices([g for g, _ in buckets], [p for _, p in buckets], k=count)
    jobs = []
    now = 0.0
    for index, gpus in enumerate(sizes):
        now += rng.expovariate(rate)
        pods = 1 if gpus <= node_gpus else math.ceil(gpus / node_gpus)
        per_pod = gpus if pods == 1 else node_gpus
        jobs.append(GangJob(index, gpus, pods, per_pod, now, rng.expovariate(1.0)))
    return jobs


@dataclass
class GangStrategyResult:
    strategy: str
    jobs: int
    placed: int
    waiting: int  # still queued when the last job arrived and the queue drained
    multi_node_jobs: int
    multi_node_placed: int
    mean_wait: float  # every placed job, in mean run times
    multi_node_mean_wait: float
    one_leaf_share: float | None  # of placed multi-node jobs no larger than a leaf
    required_domain_share: float | None  # of placed multi-node jobs
    mean_neighbour_hops: float | None  # of placed multi-node jobs
    leaf_fragmentation: float  # mean over scheduling events
    place_ms_mean: float
    place_ms_p99: float
    preferred_domain_share: float | None = None  # of placed multi-node jobs, with a preference
    kept_share: float | None = None  # of placed multi-node jobs, with a cap or slices


@dataclass(frozen=True)
class GroupOptions:
    """What numatopo's multi-node jobs declare beyond the required level; levels by label."""

    preferred: str | None = None
    most_per_domain: tuple[str, int] | None = None
    slice: tuple[str, int] | None = None

    def labels(self) -> list[tuple[str, str]]:
        """(what, level label) of every option given."""
        out = [("preferred", self.preferred)] if self.preferred else []
        for what, given in (("max-per-domain", self.most_per_domain), ("slice", self.slice)):
            if given is not None:
                out.append((what, given[0]))
        return out


@dataclass
class GangResult:
    nodes: int
    gpus: int
    levels: list[str]
    jobs: int
    sizes: str
    load: float
    seed: int
    size_histogram: dict[int, int] = field(default_factory=dict)
    too_big: int = 0  # jobs that do not fit the empty cluster under the constraint, left out
    strategies: list[GangStrategyResult] = field(default_factory=list)


Placer = Callable[["_Run", GangJob, list[Member]], dict[str, Assignment] | None]


@dataclass
class _Run:
    """One strategy's replay: its own node states, queue and measurements."""

    cluster: InitVar[ClusterFile]
    tree: DomainTree
    required: str
    clock: Clock
    options: GroupOptions = GroupOptions()
    engine: Engine = field(default_factory=Engine)
    hops: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    multi_waits: list[float] = field(default_factory=list)
    one_leaf: list[bool] = field(default_factory=list)
    in_required: list[bool] = field(default_factory=list)
    in_preferred: list[bool] = field(default_factory=list)
    kept: list[bool] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def __post_init__(self, cluster: ClusterFile) -> None:
        self.nodes = cluster.candidates(named=True)
        self.by_name = sorted(self.nodes)
        self.leaf = self.tree.levels[-1]
        self.leaf_size = max((len(n) for n in self.tree.members[-1].values()), default=0)

    def members(self, job: GangJob, policy: PolicyName) -> list[Member]:
        options = TopologyOptions(policy=policy)
        # CPUs in proportion to GPUs: half the node's CPUs per GPU, rounded down, at least 1.
        sample = next(iter(self.nodes.values())).topology
        per_gpu = max(1, len(sample.online_cpus()) // max(1, len(sample.gpus)) // 2)
        cpus = max(1, per_gpu * job.gpus_per_pod)
        container = ContainerRequest(name="main", cpu_milli=cpus * 1000, gpus=job.gpus_per_pod)
        out = []
        for rank in range(job.pods):
            request = PodRequest(NAMESPACE, f"{job.name}-{rank}", (container,), options=options)
            out.append(Member(request.key, rank, request))
        return out

    def book(self, found: Mapping[str, Assignment]) -> None:
        for key, assignment in found.items():
            self.nodes[assignment.node].state.apply(key, assignment)

    def release(self, found: Mapping[str, Assignment]) -> None:
        for key, assignment in found.items():
            self.nodes[assignment.node].state.release(key)

    def record(self, job: GangJob, found: Mapping[str, Assignment], now: float) -> None:
        wait = now - job.arrival
        self.waits.append(wait)
        if job.pods < 2:
            return
        self.multi_waits.append(wait)
        where = [found[f"{NAMESPACE}/{job.name}-{rank}"].node for rank in range(job.pods)]
        hops = [self.tree.hops(a, b) for a, b in pairwise(where)]
        self.hops.append(sum(hops) / len(hops))
        if job.pods <= self.leaf_size:
            self.one_leaf.append(len({self.tree.paths.get(n, ()) for n in where}) == 1)
        shared = {self.tree.domain_of(n, self.required) for n in where}
        self.in_required.append(len(shared) == 1 and None not in shared)
        options = self.options
        if options.preferred is not None:
            self.in_preferred.append(self.tree.spanned(options.preferred, where) == 1)
        if options.most_per_domain is not None or options.slice is not None:
            self.kept.append(self._keeps(job, where))

    def _keeps(self, job: GangJob, where: Sequence[str]) -> bool:
        """Whether the ranks' nodes keep the cap per domain and slices whole in one domain."""

        def domain(node: str, level: str) -> object:
            return node if level == HOSTNAME_LABEL else self.tree.domain_of(node, level)

        capped, sliced = self.options.most_per_domain, self.options.slice
        if capped is not None:
            level, most = capped
            counts = Counter(domain(n, level) for n in where)
            if any(count > most for value, count in counts.items() if value is not None):
                return False
        if sliced is not None and job.pods % sliced[1] == 0:
            level, piece = sliced
            for start in range(0, len(where), piece):
                found = {domain(n, level) for n in where[start : start + piece]}
                if len(found) != 1 or None in found:
                    return False
        return True


def _numatopo(run: _Run, job: GangJob, members: list[Member]) -> dict[str, Assignment] | None:
    options = run.options
    multi = job.pods > 1
    preferred = options.preferred if multi else None
    required = run.required if multi and preferred is None else None
    sliced = options.slice if multi and options.slice and job.pods % options.slice[1] == 0 else None
    spec = GroupSpec(
        NAMESPACE, job.name, job.pods, required, preferred, Strategy.CONSOLIDATED, None,
        options.most_per_domain if multi else None, sliced,
    )  # fmt: skip
    try:
        return place_group(run.tree, members, run.nodes, spec=spec, engine=run.engine).assignments
    except UnsatisfiableError:
        return None


def _required_only(run: _Run, job: GangJob, members: list[Member]) -> dict[str, Assignment] | None:
    if job.pods == 1:
        return first_fit(run.nodes, run.by_name, members, run.engine)
    for inside in run.tree.domains(run.required).values():
        known = sorted(n for n in inside if n in run.nodes)
        free = sum(run.nodes[n].state.free_gpu_count() // job.gpus_per_pod for n in known)
        found = first_fit(run.nodes, known, members, run.engine) if free >= job.pods else None
        if found is not None:
            return found
    return None


def _blind(run: _Run, job: GangJob, members: list[Member]) -> dict[str, Assignment] | None:
    return first_fit(run.nodes, run.by_name, members, run.engine)


PLACERS: Mapping[str, Placer] = {
    "numatopo": _numatopo,
    "required-only": _required_only,
    "blind": _blind,
}
GANG_STRATEGIES = tuple(PLACERS)


def simulate_gangs(
    cluster: ClusterFile,
    levels: Sequence[str],
    jobs: Sequence[GangJob],
    *,
    required: str,
    strategies: Sequence[str] = GANG_STRATEGIES,
    policy: PolicyName = PolicyName.BEST_EFFORT,
    sizes: str = "",
    load: float = 0.0,
    seed: int = 0,
    clock: Clock | None = None,
    options: GroupOptions = GroupOptions(),
    progress: Callable[[int, int], None] | None = None,
) -> GangResult:
    """Replay `jobs` (by arrival) on `cluster` under each strategy (module docstring);
    `progress(done, total)` counts job arrivals over all strategies."""
    tree = cluster.tree(levels)
    for what, level in [("required", required), *options.labels()]:
        if level not in tree.depth and level != HOSTNAME_LABEL:
            raise ValueError(f"{what} level {level!r} is not one of {', '.join(levels)}")
    for name in strategies:
        if name not in PLACERS:
            raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(GANG_STRATEGIES)}")
    # A job that does not fit the empty cluster would stop the FIFO queue for good: it is left out
    # for every strategy (asked once per job shape, with the engine).
    probe = _Run(cluster, tree, required, lambda: 0.0, options)
    fits: dict[tuple[int, int], bool] = {}
    for job in jobs:
        shape = (job.pods, job.gpus_per_pod)
        if shape not in fits:
            fits[shape] = _numatopo(probe, job, probe.members(job, policy)) is not None
    kept = [job for job in jobs if fits[(job.pods, job.gpus_per_pod)]]
    result = GangResult(
        nodes=len(probe.nodes),
        gpus=sum(len(c.topology.gpus) for c in probe.nodes.values()),
        levels=list(levels),
        jobs=len(kept),
        sizes=sizes,
        load=load,
        seed=seed,
        size_histogram=dict(sorted(Counter(job.gpus for job in kept).items())),
        too_big=len(jobs) - len(kept),
    )
    total = len(kept) * len(strategies)
    arrivals = itertools.count(1)
    arrived = (lambda: progress(next(arrivals), total)) if progress is not None else None
    for name in strategies:
        run = _Run(cluster, tree, required, clock or (lambda: 0.0), options)
        result.strategies.append(_replay(run, name, kept, policy, arrived))
    if progress is not None:
        progress(total, total)
    return result


def _replay(
    run: _Run,
    name: str,
    jobs: Sequence[GangJob],
    policy: PolicyName,
    arrived: Callable[[], None] | None = None,
) -> GangStrategyResult:
    """One strategy's replay; `arrived()` after each job's arrival."""
    placer = PLACERS[name]
    events: list[tuple[float, int, int]] = [(job.arrival, 1, job.index) for job in jobs]
    heapq.heapify(events)
    by_index = {job.index: job for job in jobs}
    queue: list[GangJob] = []
    running: dict[int, dict[str, Assignment]] = {}
    blocked: int | None = None  # the head that did not fit; nothing was freed since
    while events:
        now, kind, index = heapq.heappop(events)
        if kind == 0:  # departure
            run.release(running.pop(index))
            blocked = None
        else:
            queue.append(by_index[index])
            if arrived is not None:
                arrived()
        while queue and queue[0].index != blocked:
            job = queue[0]
            started = run.clock()
            found = placer(run, job, run.members(job, policy))
            if found is None:
                blocked = job.index
                break
            run.times.append(run.clock() - started)
            queue.pop(0)
            run.book(found)
            running[job.index] = found
            run.record(job, found, now)
            heapq.heappush(events, (now + job.duration, 0, job.index))
        run.fragmentation.append(domain_fragmentation(run.tree, run.nodes)[run.leaf])
    place_ms_mean, place_ms_p99 = milliseconds(run.times)
    return GangStrategyResult(
        strategy=name,
        jobs=len(jobs),
        placed=len(run.waits),
        waiting=len(queue),
        multi_node_jobs=sum(job.pods > 1 for job in jobs),
        multi_node_placed=len(run.multi_waits),
        mean_wait=_mean(run.waits) or 0.0,
        multi_node_mean_wait=_mean(run.multi_waits) or 0.0,
        one_leaf_share=_mean([float(x) for x in run.one_leaf]),
        required_domain_share=_mean([float(x) for x in run.in_required]),
        mean_neighbour_hops=_mean(run.hops),
        leaf_fragmentation=_mean(run.fragmentation) or 0.0,
        place_ms_mean=place_ms_mean,
        place_ms_p99=place_ms_p99,
        preferred_domain_share=_mean([float(x) for x in run.in_preferred]),
        kept_share=_mean([float(x) for x in run.kept]),
    )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
