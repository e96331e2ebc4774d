"""DRA claims decided by the engine on real topologies (AWS p4d: 8x A100 on NVLink, 4 EFA
NICs one PCIe switch from each GPU pair), with slices shaped like NVIDIA's GPU driver's
and dranet's. Every allocation numatopo writes is checked against a model of the
scheduler's allocator (selectors evaluated by cel-python) and validated against the
published resource.k8s.io/v1 schemas of Kubernetes 1.34 (kubernetes-validate's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from dra_objects import (
    GPU_CLASS_SELECTOR,
    RDMA_CLASS_SELECTOR,
    allocation_problems,
    claim,
    device_class,
    gpu_slice,
    nic_slice,
    request,
)
from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.dra import api
from numatopo_engine.dra.claims import (
    PodClaim,
    UndecidedError,
    claim_demand,
    decide_claims,
    pod_claims,
    unsupported,
)
from numatopo_engine.dra.join import DeviceKind, join_node, normal_bus_id
from numatopo_engine.errors import UnsatisfiableError
from numatopo_engine.model import Numatopology
from numatopo_engine.pod_request import request_from_pod
from numatopo_engine.resources import ResourceNames
from numatopo_engine.state import NodeState

TOPOLOGIES = Path(__file__).resolve().parents[2] / "fixtures" / "topologies"
NODE = "p4d-a"
KUBE = "1.34.0"
CONFIG = [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"sharing": "none"}}}]


def p4d() -> Any:
    return Numatopology.model_validate(json.loads((TOPOLOGIES / "aws-p4d.json").read_text())).spec


def schema_errors(obj: dict[str, Any]) -> str | None:
    try:
        kubernetes_validate.validate(obj, KUBE, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return str(exc)
    return None


def classes_wire() -> dict[str, dict[str, Any]]:
    return {
        "gpu.nvidia.com": device_class("gpu.nvidia.com", GPU_CLASS_SELECTOR, CONFIG),
        "rdma.dra.net": device_class("rdma.dra.net", RDMA_CLASS_SELECTOR),
    }


def pod(claims: dict[str, str], cpu: str = "8") -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": "16Gi"}
    return {
        "metadata": {
            "name": "train",
            "namespace": "default",
            "uid": "u1",
            "annotations": {"numatopo.io/policy": "single-numa-node"},
        },
        "spec": {
            "resourceClaims": [{"name": n, "resourceClaimName": c} for n, c in claims.items()],
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": resources,
                        "limits": resources,
                        "claims": [{"name": n} for n in claims],
                    },
                }
            ],
        },
    }


def decide(
    claims_wire: list[dict[str, Any]], state: NodeState | None = None, spec: Any = None
) -> tuple[Any, dict[str, dict[str, Any]], list[dict[str, Any]]]:
    spec = spec or p4d()
    slices = [gpu_slice(NODE, spec), nic_slice(NODE, spec)]
    for obj in [*slices, *classes_wire().values(), *claims_wire]:
        assert schema_errors(obj) is None, schema_errors(obj)
    node = join_node(NODE, spec, [api.ResourceSlice.model_validate(s) for s in slices])
    raw_pod = pod({c["metadata"]["name"]: c["metadata"]["name"] for c in claims_wire})
    base = request_from_pod(raw_pod, ResourceNames())
    claims = {c["metadata"]["name"]: api.ResourceClaim.model_validate(c) for c in claims_wire}
    classes = {n: api.DeviceClass.model_validate(c) for n, c in classes_wire().items()}
    decision = decide_claims(
        spec, state or NodeState(spec), base, pod_claims(raw_pod), claims, classes, node
    )
    written = {}
    for c in claims_wire:
        allocation = decision.allocations[c["metadata"]["name"]]
        status = {
            "allocation": allocation.written(),
            "reservedFor": [api.ResourceClaimConsumerReference(name="train", uid="u1").to_wire()],
        }
        obj = {**c, "status": status}
        assert schema_errors(obj) is None, schema_errors(obj)
        assert allocation_problems(obj, NODE, slices, classes_wire()) == []
        written[c["metadata"]["name"]] = obj
    return decision, written, slices


def devices_of(obj: dict[str, Any]) -> list[str]:
    return [r["device"] for r in obj["status"]["allocation"]["devices"]["results"]]


def test_every_device_of_the_drivers_joins_its_gpu_or_nic() -> None:
    spec = p4d()
    node = join_node(
        NODE,
        spec,
        [
            api.ResourceSlice.model_validate(s)
            for s in (gpu_slice(NODE, spec), nic_slice(NODE, spec))
        ],
    )
    assert {d.id.device: d.gpu for d in node.devices if d.kind is DeviceKind.GPU} == {
        f"gpu-{i}": i for i in range(8)
    }
    assert sorted(d.nic for d in node.devices if d.kind is DeviceKind.NIC) == sorted(
        n.name for n in spec.nics
    )
    assert {d.numa for d in node.devices if d.gpu in (0, 1, 2, 3)} == {0}
    # Only NVIDIA's own 8-digit-domain bus id: still joined, by its PCI address.
    only_driver = join_node(
        NODE, spec, [api.ResourceSlice.model_validate(gpu_slice(NODE, spec, standard=False))]
    )
    assert [d.gpu for d in only_driver.devices] == list(range(8))
    assert normal_bus_id("00000000:10:1C.0") == "0000:10:1c.0"


def test_two_devices_on_one_gpu_are_neither_joined() -> None:
    spec = p4d()
    wire = gpu_slice(NODE, spec)
    twin = json.loads(json.dumps(wire["spec"]["devices"][0]))
    twin["name"] = "gpu-0-twin"
    wire["spec"]["devices"].append(twin)
    node = join_node(NODE, spec, [api.ResourceSlice.model_validate(wire)])
    kinds = {d.id.device: d.kind for d in node.devices}
    assert kinds["gpu-0"] is kinds["gpu-0-twin"] is DeviceKind.OTHER
    assert kinds["gpu-1"] is DeviceKind.GPU


def test_an_incomplete_pool_is_not_used() -> None:
    spec = p4d()
    wire = gpu_slice(NODE, spec)
    wire["spec"]["pool"]["resourceSliceCount"] = 2
    node = join_node(NODE, spec, [api.ResourceSlice.model_validate(wire)])
    assert node.devices == ()
    assert node.incomplete_pools == ("gpu.nvidia.com/p4d-a",)


def test_four_gpus_are_one_numa_nodes_nvlinked_set_with_its_config() -> None:
    decision, written, _ = decide([claim("gpus", [request("gpu", "gpu.nvidia.com", 4)])])
    chosen = devices_of(written["gpus"])
    assert sorted(chosen) in (
        ["gpu-0", "gpu-1", "gpu-2", "gpu-3"],
        ["gpu-4", "gpu-5", "gpu-6", "gpu-7"],
    )
    assert len(decision.assignment.numa_nodes) == 1
    main = decision.assignment.containers["main"]
    assert sorted(f"gpu-{g}" for g in main.gpu_indices) == sorted(chosen)
    config = written["gpus"]["status"]["allocation"]["devices"]["config"]
    assert config == [{"source": "FromClass", "requests": ["gpu"], **CONFIG[0]}]


def test_selectors_narrow_the_choice_and_are_honoured() -> None:
    sel = 'device.attributes["gpu.nvidia.com"].index >= 5'
    _, written, _ = decide([claim("gpus", [request("gpu", "gpu.nvidia.com", 2, sel)])])
    assert set(devices_of(written["gpus"])) <= {"gpu-5", "gpu-6", "gpu-7"}


def test_nic_request_gets_the_nic_behind_the_same_pcie_switch() -> None:
    constraint = [{"requests": ["gpu", "nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    claims = [
        claim(
            "pair",
            [request("gpu", "gpu.nvidia.com", 1), request("nic", "rdma.dra.net", 1)],
            constraints=constraint,
        )
    ]
    decision, written, _ = decide(claims)
    main = decision.assignment.containers["main"]
    spec = p4d()
    paths = {(p.gpu, p.nic): p.path.value for p in spec.pci_paths}
    assert paths[(main.gpu_indices[0], main.nics[0])] == "PIX"
    assert len(devices_of(written["pair"])) == 2


def test_devices_already_held_are_not_handed_out() -> None:
    spec = p4d()
    state = NodeState(spec)
    state.apply(
        "other/pod",
        Assignment(node=NODE, containers={"c": ContainerAssignment(gpu_indices=[0, 1, 2, 3, 4])}),
    )
    _, written, _ = decide([claim("gpus", [request("gpu", "gpu.nvidia.com", 2)])], state=state)
    assert set(devices_of(written["gpus"])) <= {"gpu-5", "gpu-6", "gpu-7"}


def test_two_claims_share_no_device() -> None:
    _, written, _ = decide(
        [
            claim("a", [request("gpu", "gpu.nvidia.com", 2)]),
            claim("b", [request("gpu", "gpu.nvidia.com", 2)]),
        ]
    )
    assert not set(devices_of(written["a"])) & set(devices_of(written["b"]))


def test_too_many_for_what_the_selectors_allow_is_unsatisfiable() -> None:
    sel = 'device.attributes["gpu.nvidia.com"].index == 7'
    with pytest.raises(UnsatisfiableError):
        decide([claim("gpus", [request("gpu", "gpu.nvidia.com", 2, sel)])])


@pytest.mark.parametrize(
    ("selector", "why"),
    [
        ('device.attributes["gpu.nvidia.com"].productName.matches("A100")', "matches()"),
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability == "8.0.0"', "version"),
        ('device.capacity["gpu.nvidia.com"].memory == "40Gi"', "capacity"),
        ('device.attributes["gpu.nvidia.com"].nothere == "x"', "fails on device"),
    ],
)
def test_selectors_numatopo_cannot_judge_leave_the_claim_to_the_scheduler(
    selector: str, why: str
) -> None:
    with pytest.raises(UndecidedError, match=why.replace("(", r"\(").replace(")", r"\)")):
        decide([claim("gpus", [request("gpu", "gpu.nvidia.com", 1, selector)])])


def test_requests_the_allocator_handles_differently_are_not_decided() -> None:
    wire = claim("gpus", [request("gpu", "gpu.nvidia.com", 1)])
    wire["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    assert "allocationMode All" in (unsupported(api.ResourceClaim.model_validate(wire)) or "")
    wire = claim(
        "gpus",
        [{"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]}],
    )
    assert schema_errors(wire) is None
    assert "prioritized" in (unsupported(api.ResourceClaim.model_validate(wire)) or "")
    wire = claim("gpus", [request("gpu", "gpu.nvidia.com", 1)])
    wire["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [{"operator": "Exists"}]
    assert "tolerations" in (unsupported(api.ResourceClaim.model_validate(wire)) or "")


def test_template_claims_are_found_by_the_recorded_name() -> None:
    raw = {
        "spec": {
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "g"}]}}],
        },
        "status": {},
    }
    assert pod_claims(raw) == [PodClaim("g", None, ("main",))]
    raw["status"] = {"resourceClaimStatuses": [{"name": "g", "resourceClaimName": "train-g-x1"}]}
    assert pod_claims(raw) == [PodClaim("g", "train-g-x1", ("main",))]


def demand_of(claims_wire: list[dict[str, Any]]) -> Any:
    """`claim_demand` of a pod using `claims_wire` on the p4d (GPUs and NICs published)."""
    spec = p4d()
    slices = [gpu_slice(NODE, spec), nic_slice(NODE, spec)]
    node = join_node(NODE, spec, [api.ResourceSlice.model_validate(s) for s in slices])
    raw_pod = pod({c["metadata"]["name"]: c["metadata"]["name"] for c in claims_wire})
    base = request_from_pod(raw_pod, ResourceNames())
    claims = {c["metadata"]["name"]: api.ResourceClaim.model_validate(c) for c in claims_wire}
    classes = {n: api.DeviceClass.model_validate(c) for n, c in classes_wire().items()}
    return claim_demand(spec, base, pod_claims(raw_pod), claims, classes, node)


def test_a_claims_demand_is_its_devices_counted_in_the_container_using_it() -> None:
    """What a group planner books for a member: the container asks the claims' GPUs and
    NICs (under the spec's resources) as a DRA decision asks the engine, and may have
    only the devices the selectors let through; nothing is decided."""
    sel = 'device.attributes["gpu.nvidia.com"].index >= 4'
    found = demand_of(
        [
            claim("gpus", [request("gpu", "gpu.nvidia.com", 2, sel)]),
            claim("nic", [request("nic", "rdma.dra.net", 1)]),
        ]
    )
    (main,) = found.request.containers
    spec = p4d()
    assert (main.gpus, main.nics) == (2, 1)
    assert main.gpu_resource == spec.gpus[0].resource
    assert main.nic_resource == spec.nics[0].resource
    assert found.gpus == {4, 5, 6, 7}
    assert found.nics == {n.name for n in spec.nics}
    assert main.cpu_milli == 8000


@pytest.mark.parametrize(
    ("requests", "constraints"),
    [
        ([request("gpu", "gpu.nvidia.com", 2, 'device.attributes["gpu.nvidia.com"].index == 0')],
         []),
        # Two GPUs of the p4d share each PCIe root: never three.
        ([request("gpu", "gpu.nvidia.com", 3)],
         [{"requests": ["gpu"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]),
    ],
)  # fmt: skip
def test_too_few_devices_a_request_may_have_make_no_demand(
    requests: list[dict[str, Any]], constraints: list[dict[str, Any]]
) -> None:
    """More devices than the node has for the request (its selectors, or one value of
    its matchAttribute): unsatisfiable on the node (a planner leaves it out), never a
    demand the node cannot meet however free it is."""
    with pytest.raises(UnsatisfiableError, match="too few devices"):
        demand_of([claim("gpus", requests, constraints=constraints)])
