"""The NVML reader on GPUs in MIG mode, replayed from recorded-shape data.

No recording of a real MIG node exists: the MIG calls below are hand-built onto the
(synthetic) 8x H100 recording, in the shape the recorder writes them (handles as
`<GPU>:mig<slot>`, structs as dicts, errors by pynvml class name), with names and
sizes as NVML reports them for an H100 80GB split into 3g.40gb and 1g.10gb.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from numatopo_engine.model import Gpu, NumatopologySpec
from numatopo_exporter.discovery.discover import merge_gpu_reading
from numatopo_exporter.discovery.nvml import profile_from, read_nvml, record
from nvml_replay import ReplayNvml

NVML = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"
MIB = 1 << 20
# GPU 0: two 3g.40gb (slots 0, 1); GPU 1: seven 1g.10gb (slots 0-6); the rest: MIG off.
LAYOUT = {0: [("3g.40gb", 3, 40192)] * 2, 1: [("1g.10gb", 1, 9856)] * 7}


def mig_calls() -> dict[str, dict[str, Any]]:
    calls: dict[str, dict[str, Any]] = copy.deepcopy(
        json.loads((NVML / "h100-8gpu-nvswitch.json").read_text())["calls"]
    )
    for gpu, devices in LAYOUT.items():
        calls["nvmlDeviceGetMigMode"][str(gpu)] = [1, 1]
        calls.setdefault("nvmlDeviceGetMaxMigDeviceCount", {})[str(gpu)] = 7
        for slot in range(7):
            key = f"{gpu},{slot}"
            handles = calls.setdefault("nvmlDeviceGetMigDeviceHandleByIndex", {})
            if slot >= len(devices):
                handles[key] = {"nvmlError": "NotFound"}
                continue
            profile, slices, memory_mb = devices[slot]
            mig = f"{gpu}:mig{slot}"
            handles[key] = mig
            calls["nvmlDeviceGetName"][mig] = f"NVIDIA H100 80GB HBM3 MIG {profile}"
            calls["nvmlDeviceGetUUID"][mig] = f"MIG-{gpu:08d}-{slot:04d}-4000-8000-000000000000"
            calls["nvmlDeviceGetMemoryInfo"][mig] = {"free": 0, "total": memory_mb * MIB, "used": 0}
            calls.setdefault("nvmlDeviceGetGpuInstanceId", {})[mig] = slot + 1
            calls.setdefault("nvmlDeviceGetComputeInstanceId", {})[mig] = 0
            calls.setdefault("nvmlDeviceGetAttributes", {})[mig] = {
                "gpuInstanceSliceCount": slices,
                "computeInstanceSliceCount": slices,
                "memorySizeMB": memory_mb,
            }
    return calls


def test_mig_devices_are_read_under_their_gpu() -> None:
    reading = read_nvml(ReplayNvml(mig_calls()))
    assert [] == reading.notices
    by_index = {g.index: g for g in reading.gpus}
    assert by_index[0].mig_mode
    assert by_index[1].mig_mode
    assert not by_index[2].mig_mode
    assert by_index[2].mig_devices is None
    first = by_index[0].mig_devices or []
    assert [
        (8, "3g.40gb", "nvidia.com/mig-3g.40gb", 1),
        (9, "3g.40gb", "nvidia.com/mig-3g.40gb", 2),
    ] == [(m.index, m.profile, m.resource, m.gpu_instance) for m in first]
    assert "MIG-00000000-0001-4000-8000-000000000000" == first[1].uuid
    assert 40192 * MIB == first[0].memory_bytes
    second = by_index[1].mig_devices or []
    assert list(range(10, 17)) == [m.index for m in second]
    assert {"1g.10gb"} == {m.profile for m in second}


def test_a_recording_of_a_mig_node_replays_to_the_same_reading(tmp_path: Path) -> None:
    original = read_nvml(ReplayNvml(mig_calls()))
    out = tmp_path / "mig.json"
    record(ReplayNvml(mig_calls()), out)
    again = read_nvml(ReplayNvml.load(out))
    assert original == again
    calls = json.loads(out.read_text())["calls"]
    assert "0:mig1" == calls["nvmlDeviceGetMigDeviceHandleByIndex"]["0,1"]
    assert {"nvmlError": "NotFound"} == calls["nvmlDeviceGetMigDeviceHandleByIndex"]["0,2"]


def test_profile_from_attributes_when_the_name_lacks_it() -> None:
    attributes = SimpleNamespace(
        gpuInstanceSliceCount=3, computeInstanceSliceCount=1, memorySizeMB=40192
    )
    assert "1c.3g.40gb" == profile_from("NVIDIA H100 80GB HBM3", attributes)
    assert "2g.20gb" == profile_from("NVIDIA A100-SXM4-80GB MIG 2g.20gb", None)
    assert "1g.10gb+me" == profile_from("NVIDIA A100-SXM4-80GB MIG 1g.10gb+me", None)
    assert profile_from("NVIDIA H100", None) is None


def test_a_mig_device_without_a_profile_is_skipped_with_a_notice() -> None:
    calls = mig_calls()
    calls["nvmlDeviceGetName"]["0:mig0"] = "NVIDIA H100 80GB HBM3"
    del calls["nvmlDeviceGetAttributes"]["0:mig0"]
    reading = read_nvml(ReplayNvml(calls))
    kept = reading.gpus[0].mig_devices or []
    assert [(8, "MIG-00000000-0001-4000-8000-000000000000")] == [(m.index, m.uuid) for m in kept]
    assert any("GPU 0 MIG slot 0" in notice for notice in reading.notices)


def test_merge_numbers_other_devices_after_mig_devices() -> None:
    reading = read_nvml(ReplayNvml(mig_calls()))
    extra = Gpu(
        index=0, pci_bus_id="0000:f1:00.0", numa=0, vendor="habana", resource="habana.ai/gaudi"
    )
    base = NumatopologySpec(gpus=[extra], sources=["sysfs"])
    merged = merge_gpu_reading(base, reading)
    gaudi = next(g for g in merged.gpus if g.vendor == "habana")
    assert 17 == gaudi.index  # 8 GPUs and 9 MIG devices before it
