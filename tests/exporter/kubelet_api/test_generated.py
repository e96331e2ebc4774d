"""The generated kubelet API modules are what the .proto files beside them produce, and
speak the kubelet's service paths (a renamed package would be a silent wire break)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
API = ROOT / "exporter" / "numatopo_exporter" / "kubelet_api"


def test_generated_modules_are_current(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    work = tmp_path / "numatopo_exporter" / "kubelet_api"
    work.mkdir(parents=True)
    for proto in API.glob("*.proto"):
        shutil.copy(proto, work / proto.name)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(tmp_path),
         "--python_out", str(tmp_path), "--pyi_out", str(tmp_path),
         "--grpc_python_out", str(tmp_path),
         *(f"numatopo_exporter/kubelet_api/{p.name}" for p in API.glob("*.proto"))],
        check=True,
    )  # fmt: skip
    generated = sorted(p.name for p in work.iterdir() if p.suffix != ".proto")
    assert generated == sorted(p.name for p in API.iterdir() if "_pb2" in p.name)
    for name in generated:
        assert (work / name).read_text() == (API / name).read_text(), (
            f"{name} is stale: run scripts/generate-kubelet-api.sh"
        )


def test_service_paths_are_the_kubelets() -> None:
    from numatopo_exporter.kubelet_api import deviceplugin_pb2, podresources_pb2

    services = {
        s.full_name: [m.name for m in s.methods]
        for module in (deviceplugin_pb2, podresources_pb2)
        for s in module.DESCRIPTOR.services_by_name.values()
    }
    assert services == {
        "v1beta1.Registration": ["Register"],
        "v1beta1.DevicePlugin": [
            "GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate",
            "PreStartContainer",
        ],
        "v1.PodResourcesLister": ["List", "GetAllocatableResources", "Get"],
    }  # fmt: skip


def test_field_numbers_match_the_kubelets() -> None:
    from numatopo_exporter.kubelet_api import deviceplugin_pb2, podresources_pb2

    def numbers(message: object) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    assert numbers(deviceplugin_pb2.ContainerPreferredAllocationRequest) == {
        "available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3,
    }  # fmt: skip
    assert numbers(deviceplugin_pb2.Device) == {"ID": 1, "health": 2, "topology": 3}
    assert numbers(deviceplugin_pb2.RegisterRequest) == {
        "version": 1, "endpoint": 2, "resource_name": 3, "options": 4,
    }  # fmt: skip
    assert numbers(podresources_pb2.ContainerDevices) == {
        "resource_name": 1, "device_ids": 2, "topology": 3,
    }  # fmt: skip
    assert numbers(podresources_pb2.ContainerResources) == {
        "name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5,
    }  # fmt: skip
