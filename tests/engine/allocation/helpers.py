"""Small builders shared by the allocation tests: requests, busy nodes, random topologies."""

from __future__ import annotations

from numatopo_engine.annotations import (
    Assignment,
    ContainerAssignment,
    CpuMode,
    GpuLinksMode,
    PolicyName,
    Scope,
    SmtMode,
)
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Cpu, Gpu, GpuLink, NumaNode, NumatopologySpec
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.state import NodeState

GiB = 2**30


def pod(
    *containers: ContainerRequest,
    policy: PolicyName = PolicyName.BEST_EFFORT,
    scope: Scope = Scope.POD,
    cpu: CpuMode = CpuMode.EXCLUSIVE,
    smt: SmtMode = SmtMode.ANY,
    gpu_links: GpuLinksMode = GpuLinksMode.PREFERRED,
    max_numa_nodes: int | None = None,
    init: tuple[ContainerRequest, ...] = (),
    name: str = "p",
) -> PodRequest:
    options = TopologyOptions(
        policy=policy, scope=scope, cpu=cpu, smt=smt, gpu_links=gpu_links,
        max_numa_nodes=max_numa_nodes,
    )  # fmt: skip
    return PodRequest("ns", name, containers, init, options)


def app(
    cpus: int = 0, gpus: int = 0, *, memory: int = 0, nics: int = 0, name: str = "app"
) -> ContainerRequest:
    return ContainerRequest(
        name=name, cpu_milli=cpus * 1000, memory_bytes=memory, gpus=gpus, nics=nics
    )


def busy(spec: NumatopologySpec, *, gpus: tuple[int, ...] = (), cpus: str = "") -> NodeState:
    """A node where pod `ns/busy` already holds `gpus` and exclusive `cpus`."""
    state = NodeState(spec)
    if gpus or cpus:
        held = ContainerAssignment(cpus=CPUSet.parse(cpus), gpu_indices=list(gpus))
        state.apply("ns/busy", Assignment(node="n", containers={"busy": held}))
    return state


def small_node(
    *,
    numa: int,
    cores: int,
    threads: int,
    gpus_per_numa: int,
    links: list[tuple[int, int, float]],
    memory: int = 8 * GiB,
) -> NumatopologySpec:
    """A synthetic node: `numa` nodes of `cores` x `threads` CPUs and `gpus_per_numa` GPUs."""
    per_numa = cores * threads
    total = numa * per_numa
    cpus: list[Cpu] = []
    nodes: list[NumaNode] = []
    for n in range(numa):
        ids = []
        for core in range(cores):
            first = n * cores + core
            threads_of = [first + t * numa * cores for t in range(threads)]
            ids += threads_of
            cpus += [Cpu(id=c, core=first, socket=n, numa=n) for c in threads_of]
        nodes.append(
            NumaNode(
                id=n,
                cpus=CPUSet(ids),
                memory_bytes=memory,
                distances={str(m): 10 if m == n else 20 + abs(m - n) for m in range(numa)},
            )
        )
    assert len(cpus) == total
    gpu_count = numa * gpus_per_numa
    return NumatopologySpec(
        numa_nodes=nodes,
        cpus=sorted(cpus, key=lambda c: c.id),
        gpus=[Gpu(index=i, numa=i // gpus_per_numa) for i in range(gpu_count)],
        gpu_links=[
            GpuLink(a=a, b=b, links=int(bw // 25) or 1, bandwidth_g_bps=bw)
            for a, b, bw in links
            if a < b < gpu_count
        ],
    )
