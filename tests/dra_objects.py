"""resource.k8s.io/v1 objects shaped like those of real drivers, and a model of the
scheduler's structured allocator's check of an allocation, for the DRA tests.

Slices: NVIDIA's GPU driver (`gpu.nvidia.com`; attributes type, uuid, index, minor,
productName, brand, architecture, pcieBusID (NVML's 8-digit domain), driverVersion and
cudaComputeCapability as versions, the standard `resource.kubernetes.io/pciBusID` and
`pcieRoot`; capacity memory) and dranet (`dra.net`; ifName, rdma, pciAddress, numaNode,
rdmaDevName, `resource.kubernetes.io/pcieRoot`). One pool per node, named after it.

`allocation_problems` is written from the allocator's source
(k8s.io/dynamic-resource-allocation/structured, allocator_stable.go: validateDeviceRequest,
isSelectable/selectorsMatch, allocateDevice, the matchAttribute constraint, and the
result's config and node selector), independently of numatopo's code: it evaluates
selectors with cel-python on its own activation of the device.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import celpy

from numatopo_engine.model import NumatopologySpec

GPU_DRIVER = "gpu.nvidia.com"
NET_DRIVER = "dra.net"
CPU_DRIVER = "dra.cpu"
CPU_CLASS_SELECTOR = 'device.driver == "dra.cpu"'
GPU_CLASS_SELECTOR = (
    'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"'
)
RDMA_CLASS_SELECTOR = 'device.driver == "dra.net" && device.attributes["dra.net"].rdma == true'


def _pcie_root(bus: str) -> str:
    return f"pci{bus[:4]}:{bus[5:7]}"


def gpu_slice(node: str, spec: NumatopologySpec, *, standard: bool = True) -> dict[str, Any]:
    devices = []
    for gpu in spec.gpus:
        bus = gpu.pci_bus_id
        attributes: dict[str, Any] = {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu.uuid or f"GPU-{node}-{gpu.index:04d}"},
            "index": {"int": gpu.index},
            "minor": {"int": gpu.index},
            "productName": {"string": gpu.model or "NVIDIA A100-SXM4-40GB"},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Ampere"},
            "driverVersion": {"version": "550.90.7"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "pcieBusID": {"string": f"0000{bus}" if bus else ""},
        }
        if bus and standard:
            attributes["resource.kubernetes.io/pciBusID"] = {"string": bus}
            attributes["resource.kubernetes.io/pcieRoot"] = {"string": _pcie_root(bus)}
        if not bus:
            del attributes["pcieBusID"]
        devices.append(
            {
                "name": f"gpu-{gpu.index}",
                "attributes": attributes,
                "capacity": {"memory": {"value": "40Gi"}},
            }
        )
    return _slice(f"{node}-gpu.nvidia.com", GPU_DRIVER, node, devices)


def nic_slice(node: str, spec: NumatopologySpec) -> dict[str, Any]:
    devices = []
    for i, nic in enumerate(spec.nics):
        bus = nic.pci_bus_id
        devices.append(
            {
                "name": f"pci-{bus.replace(':', '-').replace('.', '-')}" if bus else f"nic{i}",
                "attributes": {
                    "dra.net/ifName": {"string": f"eth{i}"},
                    "dra.net/rdmaDevName": {"string": nic.name},
                    "dra.net/rdma": {"bool": True},
                    "dra.net/numaNode": {"int": nic.numa if nic.numa is not None else -1},
                    **(
                        {
                            "dra.net/pciAddress": {"string": bus},
                            "resource.kubernetes.io/pcieRoot": {"string": _pcie_root(bus)},
                        }
                        if bus
                        else {}
                    ),
                },
            }
        )
    return _slice(f"{node}-dra.net", NET_DRIVER, node, devices)


def cpu_slice(node: str, spec: NumatopologySpec) -> dict[str, Any]:
    """dra-driver-cpu in its individual mode (kubernetes-sigs/dra-driver-cpu,
    pkg/device/builder.go `cpuDeviceInfos`/`createCPUDeviceSlices`, attributes.go): one
    device per allocatable logical CPU, named `cpudevNNN` in the order of physical cores
    (a core's threads one after the other, cores by their lowest CPU id), reserved CPUs
    left out; attributes the standard numaNode, then the driver's own."""
    reserved = set(spec.reserved_cpus)
    free = [c for c in spec.cpus if c.id not in reserved and c.numa is not None]
    cores: dict[tuple[int, int], list[Any]] = {}
    for cpu in sorted(free, key=lambda c: c.id):
        cores.setdefault((cpu.socket, cpu.core), []).append(cpu)
    ordered = [cpu for group in sorted(cores.values(), key=lambda g: g[0].id) for cpu in group]
    smt = any(len(group) > 1 for group in cores.values())
    devices = [
        {
            "name": f"cpudev{number:03d}",
            "attributes": {
                "resource.kubernetes.io/numaNode": {"int": cpu.numa},
                "dra.cpu/socketID": {"int": cpu.socket},
                "dra.cpu/smtEnabled": {"bool": smt},
                "dra.cpu/cacheL3ID": {"int": cpu.socket},
                "dra.cpu/coreType": {"string": "standard"},
                "dra.cpu/coreID": {"int": cpu.core},
                "dra.cpu/cpuID": {"int": cpu.id},
                "dra.net/numaNode": {"int": cpu.numa},
            },
        }
        for number, cpu in enumerate(ordered)
    ]
    return _slice(f"{node}-dra.cpu", CPU_DRIVER, node, devices)


def _slice(name: str, driver: str, node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class(
    name: str,
    selector: str,
    config: list[dict[str, Any]] | None = None,
    *,
    extended: str | None = None,
    created: str = "2025-09-01T10:00:00Z",
) -> dict[str, Any]:
    """`extended`: the class's `extendedResourceName` (KEP-5004)."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector}}]}
    if config:
        spec["config"] = config
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "uid": f"uid-class-{name}", "creationTimestamp": created},
        "spec": spec,
    }


def claim(
    name: str,
    requests: list[dict[str, Any]],
    *,
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-claim-{name}",
            "resourceVersion": "1",
        },
        "spec": {"devices": devices},
    }


def request(name: str, device_class_name: str, count: int = 1, *selectors: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": device_class_name,
        "count": count,
        "allocationMode": "ExactCount",
    }
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


# -- the allocator's check -------------------------------------------------------------


def _activation(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """`device` as the allocator's CEL environment sees it: attributes by domain (an
    unqualified name is the driver's)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, _, ident = name.rpartition("/")
        ((_kind, plain),) = value.items()
        attributes.setdefault(domain or driver, {})[ident] = plain
    return {"driver": driver, "attributes": attributes}


def _selected(expressions: Iterable[str], driver: str, device: Mapping[str, Any]) -> bool:
    environment = celpy.Environment()
    context = {"device": celpy.json_to_cel(_activation(driver, device))}
    for expression in expressions:
        result = environment.program(environment.compile(expression)).evaluate(context)
        if not isinstance(result, celpy.celtypes.BoolType) or not result:
            return False
    return True


def _attribute(driver: str, device: Mapping[str, Any], name: str) -> object:
    attributes = device.get("attributes") or {}
    qualified = name if "/" in name else f"{driver}/{name}"
    value = attributes.get(qualified)
    if value is None and qualified.startswith(driver + "/"):
        value = attributes.get(qualified.split("/", 1)[1])
    return None if value is None else tuple(value.items())


def allocation_problems(
    claim_obj: Mapping[str, Any],
    node: str,
    slices: Iterable[Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]],
    in_use: Iterable[tuple[str, str, str]] = (),
) -> list[str]:
    """Every way the claim's `status.allocation` breaks what the allocator would give."""
    problems: list[str] = []
    allocation = claim_obj["status"]["allocation"]
    devices: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for piece in slices:
        spec = piece["spec"]
        if spec.get("nodeName") != node:
            continue
        for device in spec["devices"]:
            devices[(spec["driver"], spec["pool"]["name"], device["name"])] = device
    results = allocation["devices"]["results"]
    ids = [(r["driver"], r["pool"], r["device"]) for r in results]
    if len(set(ids)) != len(ids):
        problems.append("a device is allocated twice")
    busy = set(in_use)
    requests = {r["name"]: r for r in claim_obj["spec"]["devices"]["requests"]}
    for result, ident in zip(results, ids, strict=True):
        if result["request"] not in requests:
            problems.append(f"result for unknown request {result['request']}")
        if ident not in devices:
            problems.append(f"{ident} is no device published for {node}")
        if ident in busy:
            problems.append(f"{ident} is allocated to another claim")
    for name, req in requests.items():
        exactly = req["exactly"]
        mine = [
            ident for result, ident in zip(results, ids, strict=True) if result["request"] == name
        ]
        if len(mine) != exactly.get("count", 1):
            problems.append(f"request {name}: {len(mine)} devices, asked {exactly.get('count', 1)}")
        device_class = classes[exactly["deviceClassName"]]
        class_selectors = [
            s["cel"]["expression"] for s in device_class["spec"].get("selectors", [])
        ]
        own = [s["cel"]["expression"] for s in exactly.get("selectors", [])]
        for ident in mine:
            if ident in devices and not _selected(
                [*class_selectors, *own], ident[0], devices[ident]
            ):
                problems.append(f"request {name}: {ident} does not pass its selectors")
    for constraint in claim_obj["spec"]["devices"].get("constraints", []):
        attribute = constraint["matchAttribute"]
        covered = constraint.get("requests") or list(requests)
        values = {
            _attribute(ident[0], devices[ident], attribute)
            for result, ident in zip(results, ids, strict=True)
            if result["request"] in covered and ident in devices
        }
        if None in values or len(values) > 1:
            problems.append(f"matchAttribute {attribute}: values {sorted(map(str, values))}")
    expected_config = []
    for name, req in requests.items():
        for entry in classes[req["exactly"]["deviceClassName"]]["spec"].get("config", []):
            expected_config.append({"source": "FromClass", "requests": [name], **entry})
    for entry in claim_obj["spec"]["devices"].get("config", []):
        expected_config.append({"source": "FromClaim", **entry})
    if allocation["devices"].get("config", []) != expected_config:
        problems.append(f"config {allocation['devices'].get('config')} != {expected_config}")
    terms = allocation.get("nodeSelector", {}).get("nodeSelectorTerms", [])
    wanted = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    if terms != wanted:
        problems.append(f"nodeSelector {terms} is not node {node}'s")
    return problems
