"""What a pod needs with init and sidecar containers: per resource, the larger of the
app containers' sum (sidecars included) and each regular init container plus the
sidecars started before it (the kubelet's rule, KEP-753).

CPUs are measured as the fewest a node may have for the pod to fit: init containers
borrow the app containers' exclusive CPUs (and shared ones beyond), so what the pod
books exclusively is the apps' sum, but it fits only where the larger need fits. The
rest is measured as what the assignment books on a `NodeState`."""

from __future__ import annotations

import pytest
from helpers import GiB, pod, small_node

from numatopo_engine.allocation import allocate
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Nic, NumatopologySpec
from numatopo_engine.request import ContainerRequest, PodRequest
from numatopo_engine.state import NodeState, shared_floor

GPU = "nvidia.com/gpu"
MiB = 2**20
PAGES = 16  # 2Mi pages on the node


def node(cpus: int = 16) -> NumatopologySpec:
    spec = small_node(numa=1, cores=cpus, threads=1, gpus_per_numa=4, links=[], memory=GiB)
    numa = spec.numa_nodes[0].model_copy(update={"hugepages": {"2Mi": PAGES}})
    nics = [Nic(name=f"mlx5_{i}", numa=0) for i in range(2)]
    return spec.model_copy(update={"numa_nodes": [numa], "nics": nics})


def c(
    name: str, cpu: int = 0, gpus: int = 0, *, sidecar: bool = False, **kw: int
) -> ContainerRequest:
    """A container asking for `cpu` whole CPUs, `gpus` GPUs, `memory` MiB and
    `pages` 2Mi huge pages."""
    return ContainerRequest(
        name=name,
        cpu_milli=cpu * 1000,
        memory_bytes=kw.get("memory", 0) * MiB,
        hugepages={"2Mi": kw["pages"] * 2 * MiB} if "pages" in kw else {},
        gpus=gpus,
        gpu_resource=GPU if gpus else None,
        nics=kw.get("nics", 0),
        nic_resource="rdma/ib" if kw.get("nics") else None,
        restartable=sidecar,
    )


def fewest_cpus(request: PodRequest) -> int:
    """The fewest CPUs a node (otherwise as `node()`) may have for the pod to fit, less
    the one the kubelet keeps for the shared pool (`shared_floor`)."""
    for cpus in range(1, 17):
        spec = node(cpus)
        try:
            allocate(spec, NodeState(spec), request, "n")
        except UnsatisfiableError:
            continue
        return cpus - shared_floor(spec)
    raise AssertionError("fits on no node of up to 16 CPUs")


def booked(request: PodRequest) -> tuple[int, int, int, int, int]:
    """(CPUs needed, GPUs, MiB of memory, 2Mi pages, NICs) the pod's assignment books."""
    spec = node()
    state = NodeState(spec)
    state.apply("ns/p", allocate(spec, NodeState(spec), request, "n").assignment)
    return (
        fewest_cpus(request),
        4 - len(state.free_gpus()),
        (GiB - state.free_memory(0)) // MiB,
        PAGES - state.free_hugepages(0, "2Mi") // (2 * MiB),
        2 - len(state.free_nics()),
    )


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        pytest.param(
            pod(c("a", 2, 1, memory=10), c("b", 3, 2, memory=5, nics=1)),
            (5, 3, 15, 0, 1),
            id="app-containers-add-up",
        ),
        pytest.param(
            pod(c("app", 4), init=(c("big-init", 12, memory=1),)),
            (12, 0, 1, 0, 0),
            id="largest-init-container-wins",
        ),
        pytest.param(
            pod(c("app", 4, 2), init=(c("init", 1, 1),)),
            (4, 2, 0, 0, 0),
            id="app-sum-wins-over-small-init",
        ),
        pytest.param(
            pod(c("app", 4), init=(c("log", 1, sidecar=True),)),
            (5, 0, 0, 0, 0),
            id="sidecar-adds-to-app-sum",
        ),
        pytest.param(
            pod(
                c("app", 2),
                init=(c("proxy", 3, sidecar=True), c("migrate", 6), c("late", 1, sidecar=True)),
            ),
            (9, 0, 0, 0, 0),
            id="init-after-sidecar-counts-the-sidecar",
        ),
        pytest.param(
            pod(c("app", 8), init=(c("migrate", 6), c("proxy", 3, sidecar=True))),
            (11, 0, 0, 0, 0),
            id="init-before-sidecar-does-not",
        ),
        pytest.param(
            pod(c("app", 1, pages=4), init=(c("init", 0, pages=8),)),
            (1, 0, 0, 8, 0),
            id="hugepages-per-size-max",
        ),
        pytest.param(
            pod(c("app", 8, memory=1), init=(c("init", 1, memory=100),)),
            (8, 0, 100, 0, 0),
            id="max-is-taken-per-resource",
        ),
    ],
)
def test_a_pod_books_the_larger_of_its_apps_and_each_init_container(
    request_: PodRequest, expected: tuple[int, int, int, int, int]
) -> None:
    assert expected == booked(request_)
