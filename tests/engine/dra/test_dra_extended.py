"""Extended resources DRA serves (KEP-5004): which of a node's GPUs and NICs each
DeviceClass naming an extended resource selects, on the AWS p4d with slices shaped like
NVIDIA's GPU driver's and dranet's; every class schema-valid for Kubernetes 1.34."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate

from dra_objects import GPU_CLASS_SELECTOR, RDMA_CLASS_SELECTOR, device_class, gpu_slice, nic_slice
from dra_objects import claim as claim_body
from dra_objects import request as request_body
from numatopo_engine.dra import api
from numatopo_engine.dra.claims import PodClaim, decide_claims
from numatopo_engine.dra.extended import (
    EXTENDED_ENTRY,
    asked_served,
    extended_claim,
    extended_names,
)
from numatopo_engine.dra.join import DeviceId, DraNode, join_node
from numatopo_engine.dra.pods import devices_from_claims
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.pod_request import request_from_pod
from numatopo_engine.resources import ResourceNames
from numatopo_engine.state import NodeState

TOPOLOGIES = Path(__file__).resolve().parents[2] / "fixtures" / "topologies"
NODE = "p4d-a"
LOW_GPUS = GPU_CLASS_SELECTOR + ' && device.attributes["gpu.nvidia.com"].index < 4'


def p4d() -> NumatopologySpec:
    return Numatopology.model_validate(json.loads((TOPOLOGIES / "aws-p4d.json").read_text())).spec


def joined() -> DraNode:
    spec = p4d()
    return join_node(
        NODE,
        spec,
        [
            api.ResourceSlice.model_validate(b)
            for b in (gpu_slice(NODE, spec), nic_slice(NODE, spec))
        ],
    )


def classes(*bodies: dict[str, Any]) -> list[api.DeviceClass]:
    for body in bodies:
        kubernetes_validate.validate(body, "1.34.0", strict=True)
    return [api.DeviceClass.model_validate(b) for b in bodies]


def gpu(index: int) -> DeviceId:
    return DeviceId("gpu.nvidia.com", NODE, f"gpu-{index}")


def test_each_class_naming_a_resource_names_the_devices_it_selects() -> None:
    """All GPUs are `example.com/gpu`; GPUs 0-3 are also `example.com/gpu-low` (a second
    class selecting them); NICs and classes naming nothing give no name."""
    found = extended_names(
        joined(),
        classes(
            device_class("gpu.nvidia.com", GPU_CLASS_SELECTOR, extended="example.com/gpu"),
            device_class("low-gpus", LOW_GPUS, extended="example.com/gpu-low"),
            device_class("rdma.dra.net", RDMA_CLASS_SELECTOR),
        ),
    )
    low = ("example.com/gpu", "example.com/gpu-low")
    assert found == {gpu(i): low if i < 4 else ("example.com/gpu",) for i in range(8)}


def test_of_classes_naming_one_resource_the_one_created_last_serves_it() -> None:
    """As kube-scheduler picks: created later wins; created in the same second, the name
    sorted first."""
    older = device_class(
        "all-gpus", GPU_CLASS_SELECTOR, extended="example.com/gpu", created="2025-09-01T10:00:00Z"
    )
    newer = device_class(
        "low-gpus", LOW_GPUS, extended="example.com/gpu", created="2025-09-02T10:00:00Z"
    )
    assert set(extended_names(joined(), classes(older, newer))) == {gpu(i) for i in range(4)}
    same_time = device_class(
        "a-gpus", GPU_CLASS_SELECTOR + ' && device.attributes["gpu.nvidia.com"].index < 2',
        extended="example.com/gpu", created="2025-09-02T10:00:00Z",
    )  # fmt: skip
    found = extended_names(joined(), classes(older, newer, same_time))
    assert set(found) == {gpu(0), gpu(1)}


def test_a_class_numatopo_cannot_evaluate_names_no_device() -> None:
    """`matches()` (RE2 in the scheduler) is not evaluated: which devices the class
    selects is unknown, so none is named after it."""
    regex = (
        GPU_CLASS_SELECTOR + ' && device.attributes["gpu.nvidia.com"].productName.matches("A1.*")'
    )
    found = extended_names(
        joined(),
        classes(
            device_class("regex", regex, extended="example.com/regex"),
            device_class("rdma.dra.net", RDMA_CLASS_SELECTOR, extended="example.com/rdma"),
        ),
    )
    assert set(found.values()) == {("example.com/rdma",)}
    assert len(found) == len(p4d().nics)


def test_a_claim_on_a_class_naming_a_resource_is_decided() -> None:
    """`extendedResourceName` changes nothing in how a claim naming the class is
    allocated: such a claim is decided like any other (not left to the scheduler as a
    class with a field numatopo does not know)."""
    spec = p4d()
    body = claim_body("pair", [request_body("gpu", "gpu.nvidia.com", 2)])
    pod = {
        "metadata": {"name": "train", "namespace": "default", "uid": "u1",
                     "annotations": {"numatopo.io/policy": "single-numa-node"}},
        "spec": {
            "resourceClaims": [{"name": "pair", "resourceClaimName": "pair"}],
            "containers": [{"name": "main", "resources": {
                "requests": {"cpu": "8", "memory": "16Gi"},
                "limits": {"cpu": "8", "memory": "16Gi"}, "claims": [{"name": "pair"}]}}],
        },
    }  # fmt: skip
    (gpu_class,) = classes(
        device_class("gpu.nvidia.com", GPU_CLASS_SELECTOR, extended="example.com/gpu")
    )
    decided = decide_claims(
        spec,
        NodeState(spec),
        request_from_pod(pod, ResourceNames()),
        [PodClaim("pair", "pair", ("main",))],
        {"pair": api.ResourceClaim.model_validate(body)},
        {"gpu.nvidia.com": gpu_class},
        joined(),
    )
    (allocation,) = decided.allocations.values()
    assert len(allocation.devices.results) == 2


def extended_pod(resource: str, status: bool) -> dict[str, Any]:
    """A pod asking 2 of `resource` and no claim; `status`: kube-scheduler named its
    claim for them (PreBind), schema-valid for 1.34."""
    amounts = {"cpu": "8", "memory": "16Gi", resource: "2"}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [
            {"name": "main", "image": "busybox",
             "resources": {"requests": amounts, "limits": amounts}}]},
    }  # fmt: skip
    if status:
        mapping = {"containerName": "main", "resourceName": resource, "requestName": "r0"}
        pod["status"] = {"extendedResourceClaimStatus": {
            "resourceClaimName": "train-extended-resources-abcde",
            "requestMappings": [mapping]}}  # fmt: skip
    kubernetes_validate.validate(pod, "1.34.0", strict=True)
    return pod


def test_the_extended_resources_a_pod_asks_that_classes_serve() -> None:
    """Explicit names and the implicit `deviceclass.resource.kubernetes.io/<class>`;
    not a name no class has."""
    served = classes(
        device_class("gpu.nvidia.com", GPU_CLASS_SELECTOR, extended="example.com/gpu"),
        device_class("rdma.dra.net", RDMA_CLASS_SELECTOR),
    )
    implicit = "deviceclass.resource.kubernetes.io/rdma.dra.net"
    assert asked_served(extended_pod("example.com/gpu", False), served) == ["example.com/gpu"]
    assert asked_served(extended_pod(implicit, False), served) == [implicit]
    assert asked_served(extended_pod("example.com/fpga", False), served) == []
    assert asked_served(extended_pod("deviceclass.resource.kubernetes.io/x", False), served) == []


def test_the_claim_kube_scheduler_made_is_one_of_the_pods_claims() -> None:
    """Its devices go to the container each request maps to, and the pod's devices come
    from claims (the agent does not compare them with device plugins') unless a
    container asks a device-plugin resource too."""
    pod = extended_pod("example.com/gpu", True)
    assert extended_claim(pod) == PodClaim(
        EXTENDED_ENTRY, "train-extended-resources-abcde", ("main",), (("r0", "main"),)
    )
    assert extended_claim(extended_pod("example.com/gpu", False)) is None
    is_device = ResourceNames().is_gpu
    assert devices_from_claims(pod, is_device)
    assert not devices_from_claims(extended_pod("example.com/gpu", False), is_device)
    # The mapping, not the name, says where devices come from: `nvidia.com/gpu` mapped to the
    # claim (a node where DRA serves it while others run the device plugin) is the claim's...
    assert devices_from_claims(extended_pod("nvidia.com/gpu", True), is_device)
    # ...and a device-plugin name the claim does not map is the device plugin's.
    both = extended_pod("example.com/gpu", True)
    both["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    both["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 1
    assert not devices_from_claims(both, is_device)
