"""`effective_pod_totals`: the kubelet's pod-level request with init and sidecar containers."""

from __future__ import annotations

import pytest

from numatopo_engine.pod_request import effective_pod_totals
from numatopo_engine.request import ContainerRequest, PodRequest

GPU = "nvidia.com/gpu"


def c(
    name: str, cpu: int = 0, gpus: int = 0, *, sidecar: bool = False, **kw: int
) -> ContainerRequest:
    """A container asking for `cpu` whole CPUs, `gpus` GPUs and `hugepages_2mi` bytes."""
    return ContainerRequest(
        name=name,
        cpu_milli=cpu * 1000,
        memory_bytes=kw.get("memory", 0),
        hugepages={"2Mi": kw["hugepages_2mi"]} if "hugepages_2mi" in kw else {},
        gpus=gpus,
        gpu_resource=GPU if gpus else None,
        nics=kw.get("nics", 0),
        nic_resource="rdma/ib" if kw.get("nics") else None,
        restartable=sidecar,
    )


def pod_of(
    containers: tuple[ContainerRequest, ...], init: tuple[ContainerRequest, ...] = ()
) -> PodRequest:
    return PodRequest(namespace="ns", name="p", containers=containers, init_containers=init)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        pytest.param(
            pod_of((c("a", 2, 1, memory=10), c("b", 3, 2, memory=5, nics=1))),
            c("pod", 5, 3, memory=15, nics=1),
            id="app-containers-add-up",
        ),
        pytest.param(
            pod_of((c("app", 4),), (c("big-init", 12, memory=1),)),
            c("pod", 12, memory=1),
            id="largest-init-container-wins",
        ),
        pytest.param(
            pod_of((c("app", 4, 2),), (c("init", 1, 1),)),
            c("pod", 4, 2),
            id="app-sum-wins-over-small-init",
        ),
        pytest.param(
            pod_of((c("app", 4),), (c("log", 1, sidecar=True),)),
            c("pod", 5),
            id="sidecar-adds-to-app-sum",
        ),
        pytest.param(
            pod_of(
                (c("app", 2),),
                (c("proxy", 3, sidecar=True), c("migrate", 6), c("late", 1, sidecar=True)),
            ),
            c("pod", 9),
            id="init-after-sidecar-counts-the-sidecar",
        ),
        pytest.param(
            pod_of(
                (c("app", 8),),
                (c("migrate", 6), c("proxy", 3, sidecar=True)),
            ),
            c("pod", 11),
            id="init-before-sidecar-does-not",
        ),
        pytest.param(
            pod_of((c("app", 1, hugepages_2mi=4),), (c("init", 0, hugepages_2mi=8),)),
            c("pod", 1, hugepages_2mi=8),
            id="hugepages-per-size-max",
        ),
        pytest.param(
            pod_of((c("app", 8, memory=1),), (c("init", 1, memory=100),)),
            c("pod", 8, memory=100),
            id="max-is-taken-per-resource",
        ),
    ],
)
def test_effective_pod_totals(request_: PodRequest, expected: ContainerRequest) -> None:
    actual = effective_pod_totals(request_)

    assert expected == actual
