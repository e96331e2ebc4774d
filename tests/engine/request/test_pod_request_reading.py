"""`request_from_pod`: containers, quantities and device resources read from real-shaped pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from numatopo_engine.annotations import CpuMode, GpuLinksMode, PolicyName, Scope, SmtMode
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.pod_request import request_from_pod, wants_topology
from numatopo_engine.request import ContainerRequest, PodRequest, TopologyOptions
from numatopo_engine.resources import ResourceNames

PODS = Path(__file__).resolve().parents[2] / "fixtures" / "pods"
GiB = 2**30
MiB = 2**20


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((PODS / name).read_text())
    return loaded


def pod(*containers: dict[str, Any], **annotations: str) -> dict[str, Any]:
    """A minimal pod; keyword `policy="x"` becomes annotation `numatopo.io/policy: x`."""
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {
                f"numatopo.io/{k.replace('_', '-')}": v for k, v in annotations.items()
            },
        },
        "spec": {"containers": list(containers)},
    }


def container(name: str = "main", **resources: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "resources": resources}


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        pytest.param(
            "single-gpu.yaml",
            PodRequest(
                namespace="research",
                name="notebook",
                containers=(
                    ContainerRequest(
                        name="jupyter",
                        cpu_milli=4000,
                        memory_bytes=16 * GiB,
                        gpus=1,
                        gpu_resource="nvidia.com/gpu",
                    ),
                ),
                options=TopologyOptions(policy=PolicyName.BEST_EFFORT),
            ),
            id="single-gpu-notebook",
        ),
        pytest.param(
            "nvlink-4gpu-required.yaml",
            PodRequest(
                namespace="ml",
                name="train-resnet",
                containers=(
                    ContainerRequest(
                        name="train",
                        cpu_milli=8000,
                        memory_bytes=64 * GiB,
                        hugepages={"2Mi": GiB},
                        gpus=4,
                        gpu_resource="nvidia.com/gpu",
                        nics=1,
                        nic_resource="rdma/ib",
                    ),
                ),
                options=TopologyOptions(
                    policy=PolicyName.SINGLE_NUMA_NODE,
                    gpu_links=GpuLinksMode.REQUIRED,
                    smt=SmtMode.FULL_CORES,
                ),
            ),
            id="four-nvlink-gpus-limits-only",
        ),
        pytest.param(
            "cpu-pinned.yaml",
            PodRequest(
                namespace="trading",
                name="order-matcher",
                containers=(
                    ContainerRequest(name="matcher", cpu_milli=6000, memory_bytes=8 * GiB),
                ),
                options=TopologyOptions(policy=PolicyName.SINGLE_NUMA_NODE, cpu=CpuMode.EXCLUSIVE),
            ),
            id="whole-cpus-default-to-exclusive",
        ),
        pytest.param(
            "multi-container-pod-scope.yaml",
            PodRequest(
                namespace="serving",
                name="triton",
                containers=(
                    ContainerRequest(
                        name="server",
                        cpu_milli=6000,
                        memory_bytes=24 * GiB,
                        gpus=2,
                        gpu_resource="nvidia.com/gpu",
                    ),
                    ContainerRequest(name="metrics", cpu_milli=250, memory_bytes=128 * MiB),
                ),
                options=TopologyOptions(
                    policy=PolicyName.RESTRICTED, scope=Scope.POD, cpu=CpuMode.NUMA
                ),
            ),
            id="fractional-sidecar-defaults-to-numa",
        ),
        pytest.param(
            "init-containers.yaml",
            PodRequest(
                namespace="ml",
                name="finetune",
                containers=(
                    ContainerRequest(
                        name="train",
                        cpu_milli=8000,
                        memory_bytes=48 * GiB,
                        gpus=2,
                        gpu_resource="nvidia.com/gpu",
                    ),
                ),
                init_containers=(
                    ContainerRequest(name="fetch-data", cpu_milli=12000, memory_bytes=32 * GiB),
                    ContainerRequest(
                        name="log-shipper",
                        cpu_milli=1000,
                        memory_bytes=512 * MiB,
                        restartable=True,
                    ),
                ),
                options=TopologyOptions(policy=PolicyName.SINGLE_NUMA_NODE, cpu=CpuMode.NUMA),
            ),
            id="init-and-sidecar-containers-kept-apart",
        ),
    ],
)
def test_fixture_pods_read_as_requests(fixture: str, expected: PodRequest) -> None:
    actual = request_from_pod(load(fixture))

    assert expected == actual


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param(
            {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}},
            ContainerRequest(name="main", cpu_milli=500),
            id="request-wins-over-limit",
        ),
        pytest.param(
            {"limits": {"cpu": 2, "memory": "1.5Gi"}},
            ContainerRequest(name="main", cpu_milli=2000, memory_bytes=3 * GiB // 2),
            id="limits-stand-in-for-missing-requests",
        ),
        pytest.param(
            {"requests": {"cpu": 0.25, "memory": "1e3"}},
            ContainerRequest(name="main", cpu_milli=250, memory_bytes=1000),
            id="yaml-numbers-and-exponents",
        ),
        pytest.param(
            {"limits": {"hugepages-1Gi": "4Gi", "hugepages-2Mi": "0"}},
            ContainerRequest(name="main", hugepages={"1Gi": 4 * GiB}),
            id="zero-hugepages-are-dropped",
        ),
        pytest.param(
            {"limits": {"amd.com/gpu": "2", "rdma/hca_shared_devices_a": "1"}},
            ContainerRequest(
                name="main",
                gpus=2,
                gpu_resource="amd.com/gpu",
                nics=1,
                nic_resource="rdma/hca_shared_devices_a",
            ),
            id="amd-gpu-and-shared-rdma-pool",
        ),
        pytest.param(
            {"limits": {"nvidia.com/gpu": "0", "ephemeral-storage": "10Gi", "example.com/foo": 1}},
            ContainerRequest(name="main"),
            id="zero-gpus-and-unrelated-resources-ignored",
        ),
        pytest.param(
            {},
            ContainerRequest(name="main"),
            id="best-effort-container",
        ),
    ],
)
def test_container_quantities(resources: dict[str, Any], expected: ContainerRequest) -> None:
    actual = request_from_pod(pod(container(**resources))).containers[0]

    assert expected == actual


def test_configured_resource_names_decide_what_counts() -> None:
    """A cluster that names MIG slices as GPUs and SR-IOV VFs as NICs gets them counted."""
    names = ResourceNames(gpu=("nvidia.com/mig-*",), nic=("intel.com/sriov_*",))
    manifest = pod(
        container(limits={"nvidia.com/mig-1g.10gb": "3", "intel.com/sriov_netdevice": "2"})
    )

    actual = request_from_pod(manifest, names).containers[0]

    assert (
        ContainerRequest(
            name="main",
            gpus=3,
            gpu_resource="nvidia.com/mig-1g.10gb",
            nics=2,
            nic_resource="intel.com/sriov_netdevice",
        )
        == actual
    )


def test_gpu_patterns_win_over_nic_patterns() -> None:
    """A resource matched by both lists is a GPU, never counted twice."""
    names = ResourceNames(gpu=("vendor/*",), nic=("vendor/*",))

    actual = request_from_pod(pod(container(limits={"vendor/x": "1"})), names).containers[0]

    assert (1, 0) == (actual.gpus, actual.nics)


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        pytest.param(pod(container(), policy="none"), True, id="policy-none-still-opts-in"),
        pytest.param(pod(container(), policy="bogus"), True, id="invalid-policy-opts-in"),
        pytest.param(pod(container()), False, id="no-policy"),
        pytest.param({"metadata": {"annotations": "x"}}, False, id="annotations-not-a-mapping"),
        pytest.param({"metadata": None}, False, id="no-metadata"),
        pytest.param("a pod", False, id="not-a-mapping"),
    ],
)
def test_wants_topology(manifest: Any, expected: bool) -> None:
    assert expected == wants_topology(manifest)


def test_pod_without_policy_is_read_with_policy_none() -> None:
    actual = request_from_pod(pod(container(limits={"cpu": "1"})))

    assert TopologyOptions(policy=PolicyName.NONE) == actual.options


@pytest.mark.parametrize(
    ("metadata", "spec", "expected"),
    [
        pytest.param(
            {"name": "a", "uid": "1234"},
            {"nodeName": "gpu-07", "containers": [container()]},
            ("default", "a", "1234", "gpu-07"),
            id="namespace-defaults-node-name-read",
        ),
        pytest.param(
            {"generateName": "job-", "namespace": "x", "uid": 7},
            {"nodeName": "", "containers": [container()]},
            ("x", "job-", "", None),
            id="generate-name-only-odd-uid-empty-node",
        ),
    ],
)
def test_pod_identity(
    metadata: dict[str, Any], spec: dict[str, Any], expected: tuple[str, str, str, str | None]
) -> None:
    actual = request_from_pod({"metadata": metadata, "spec": spec})

    assert expected == (actual.namespace, actual.name, actual.uid, actual.node_name)


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param([], "pod", "expected a mapping, got list", id="pod-is-a-list"),
        pytest.param({"kind": "Deployment"}, "kind", "expected a Pod", id="not-a-pod"),
        pytest.param({"metadata": {"name": "p"}}, "spec", "got nothing", id="missing-spec"),
        pytest.param(
            {"metadata": {"name": "p"}, "spec": {"containers": {"name": "a"}}},
            "spec.containers",
            "expected a list of containers, got dict",
            id="containers-not-a-list",
        ),
        pytest.param(
            {"metadata": {"name": "p"}, "spec": {"containers": []}},
            "spec.containers",
            "got an empty list",
            id="no-containers",
        ),
        pytest.param(
            {"metadata": {"name": "p"}, "spec": {"containers": ["main"]}},
            "containers[0]",
            "expected a mapping, got str",
            id="container-is-a-string",
        ),
        pytest.param(
            {"metadata": {"name": "p"}, "spec": {"containers": [{"image": "x"}]}},
            "containers[0].name",
            "non-empty name",
            id="container-without-name",
        ),
        pytest.param(
            {"metadata": {}, "spec": {"containers": [container()]}},
            "metadata.name",
            "needs a name",
            id="pod-without-name",
        ),
        pytest.param(
            {"metadata": {"name": 5}, "spec": {"containers": [container()]}},
            "metadata.name",
            "expected a string, got int",
            id="pod-name-not-a-string",
        ),
        pytest.param(
            pod(container("a"), container("a")),
            "spec.containers",
            "'a' is used twice",
            id="duplicate-container-names",
        ),
        pytest.param(
            {
                "metadata": {"name": "p"},
                "spec": {
                    "initContainers": [{"name": "i", "restartPolicy": "OnFailure"}],
                    "containers": [container()],
                },
            },
            "initContainers[i].restartPolicy",
            "'OnFailure' is not allowed",
            id="init-restart-policy-not-always",
        ),
        pytest.param(
            pod({"name": "main", "resources": []}),
            "containers[main].resources",
            "expected a mapping, got list",
            id="resources-not-a-mapping",
        ),
        pytest.param(
            pod(container(requests={"cpu": "two"})),
            "containers[main].resources.requests.cpu",
            "'two' is not a valid quantity",
            id="cpu-not-a-quantity",
        ),
        pytest.param(
            pod(container(requests={"cpu": True})),
            "containers[main].resources.requests.cpu",
            "got bool",
            id="cpu-is-a-boolean",
        ),
        pytest.param(
            pod(container(requests={"memory": "-1Gi"})),
            "containers[main].resources.requests.memory",
            "negative",
            id="negative-memory",
        ),
        pytest.param(
            pod(container(requests={"cpu": "1e999999999"})),
            "containers[main].resources.requests.cpu",
            "not a valid quantity",
            id="exponent-overflow",
        ),
        pytest.param(
            pod(container(requests={"cpu": "4"}, limits={"cpu": "2"})),
            "containers[main].resources.requests.cpu",
            "4 is above the limit 2",
            id="request-above-limit",
        ),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "0.5"})),
            "containers[main].resources.limits.nvidia.com/gpu",
            "0.5 is not a whole number",
            id="half-a-gpu",
        ),
        pytest.param(
            pod(container(limits={"rdma/ib": "1500m"})),
            "containers[main].resources.limits.rdma/ib",
            "1.5 is not a whole number",
            id="fractional-nic",
        ),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "2M"})),
            "containers[main].resources.limits.nvidia.com/gpu",
            "2000000 is above the limit of 1000000",
            id="absurd-gpu-count",
        ),
        pytest.param(
            pod(container(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"})),
            "containers[main].resources.requests.nvidia.com/gpu",
            "requests must equal limits",
            id="gpu-request-differs-from-limit",
        ),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "1", "amd.com/gpu": "1"})),
            "containers[main].resources",
            "both amd.com/gpu and nvidia.com/gpu",
            id="two-gpu-vendors-in-one-container",
        ),
        pytest.param(
            pod(
                container("a", limits={"nvidia.com/gpu": "1"}),
                container("b", limits={"amd.com/gpu": "1"}),
            ),
            "spec.containers",
            "GPUs under both amd.com/gpu and nvidia.com/gpu",
            id="two-gpu-vendors-in-one-pod",
        ),
        pytest.param(
            pod(container(limits={"rdma/ib": "1", "rdma/roce": "1"})),
            "containers[main].resources",
            "NICs under both rdma/ib and rdma/roce",
            id="two-nic-pools-in-one-container",
        ),
        pytest.param(
            pod(container(limits={"hugepages-huge": "1Gi"})),
            "containers[main].resources.limits.hugepages-huge",
            "not a page size",
            id="bad-hugepage-size",
        ),
        pytest.param(
            pod(container(requests={"hugepages-2Mi": "2Mi"}, limits={"hugepages-2Mi": "4Mi"})),
            "containers[main].resources.requests.hugepages-2Mi",
            "requests must equal limits",
            id="hugepage-request-differs-from-limit",
        ),
        pytest.param(
            pod(container(requests={"cpu": "1" * 10_000})),
            "containers[main].resources.requests.cpu",
            "(10000 characters)",
            id="ten-thousand-digit-quantity",
        ),
        pytest.param(
            pod(container(requests={3: "1"})),  # type: ignore[dict-item]
            "containers[main].resources",
            "resource names must be strings",
            id="resource-name-not-a-string",
        ),
    ],
)
def test_invalid_manifests_name_the_field(manifest: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        request_from_pod(manifest)

    assert field == caught.value.field
    assert message in caught.value.message


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)
resource_names = st.sampled_from(
    ["cpu", "memory", "hugepages-2Mi", "hugepages-", "nvidia.com/gpu", "amd.com/gpu", "rdma/ib"]
)
quantities = st.sampled_from(["1", "0", "-1", "1.5", "2Gi", "1e400", "9" * 70]) | json_like
resource_maps = st.dictionaries(resource_names, quantities, max_size=4) | json_like
containers = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", "", None]) | json_like},
    optional={
        "resources": st.fixed_dictionaries(
            {}, optional={"requests": resource_maps, "limits": resource_maps}
        )
        | json_like,
        "restartPolicy": st.sampled_from(["Always", "Never"]) | json_like,
    },
)


@given(
    spec=st.fixed_dictionaries(
        {},
        optional={
            "containers": st.lists(containers, max_size=3) | json_like,
            "initContainers": st.lists(containers, max_size=2) | json_like,
            "nodeName": json_like,
        },
    )
    | json_like,
    metadata=st.fixed_dictionaries({"name": st.just("p")}, optional={"uid": json_like}) | json_like,
)
def test_any_manifest_gives_a_request_or_invalid_request(metadata: Any, spec: Any) -> None:
    """Whatever the manifest holds, the only error is `InvalidRequestError`."""
    outcome: PodRequest | InvalidRequestError
    try:
        outcome = request_from_pod({"metadata": metadata, "spec": spec})
    except InvalidRequestError as exc:
        outcome = exc

    if isinstance(outcome, InvalidRequestError):
        assert outcome.field
    else:
        assert outcome.containers
