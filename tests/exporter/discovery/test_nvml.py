"""The NVML reader, replaying recordings of NVML's answers.

`h200-1gpu-firecracker.json` was recorded on a real machine (one H200 in a Firecracker VM,
`python -m numatopo_exporter.discovery.nvml --record`, tests/fixtures/captured/README.md);
the reader's path on a real driver is the one those tests replay. The other recordings
are synthetic (tests/fixtures/nvml/synthesize.py), built to match the `nvidia-smi topo -m`
matrices of real machines in tests/fixtures/topo/: NVLinks, NVSwitches, MIG and failing
GPUs are so far proven only against what those matrices say.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from numatopo_engine.model import Gpu, PathType
from numatopo_exporter.discovery.errors import SourceUnavailableError
from numatopo_exporter.discovery.nvidia_smi_topo import read_nvidia_smi_topo
from numatopo_exporter.discovery.nvml import NO_DRIVER, read_nvml, record
from nvml_replay import ReplayNvml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NVML = FIXTURES / "nvml"


def _calls(name: str) -> dict[str, dict[str, Any]]:
    calls: dict[str, dict[str, Any]] = json.loads((NVML / name).read_text())["calls"]
    return calls


def _links(reading: Any) -> dict[tuple[int, int], int]:
    return {(x.a, x.b): x.links for x in reading.gpu_links}


REAL_H200 = "h200-1gpu-firecracker.json"


def test_real_h200_reads_as_one_gpu_without_links() -> None:
    """The real recording: one H200, no NVLink, no NUMA node from NVML, and no notice.

    The VM's driver answers NotSupported for the NUMA node and for every one of the 36
    NVLink states: features that are not there, not failures, so nothing to report.
    """
    reading = read_nvml(ReplayNvml.load(NVML / REAL_H200))

    assert [
        Gpu(
            index=0,
            uuid="GPU-e85e6fc9-cfd7-d117-a189-4ceead5d0b22",
            pci_bus_id="0000:00:06.0",
            numa=None,
            vendor="nvidia",
            model="NVIDIA H200",
            memory_bytes=150754820096,
            resource="nvidia.com/gpu",
            mig_mode=False,
        )
    ] == reading.gpus
    assert ([], [], []) == (reading.gpu_links, reading.gpu_paths, reading.notices)


def test_real_h200_recording_answers_not_supported() -> None:
    """What the test above relies on: the machine said NotSupported, and nothing failed."""
    calls = _calls(REAL_H200)
    errors = {
        (call, key): answer["nvmlError"]
        for call, answers in calls.items()
        for key, answer in answers.items()
        if isinstance(answer, dict) and "nvmlError" in answer
    }

    assert {"NotSupported"} == set(errors.values())
    assert {("nvmlDeviceGetNumaNodeId", "0")} | {
        ("nvmlDeviceGetNvLinkState", f"0,{link}") for link in range(36)
    } == set(errors)
    assert False is json.loads((NVML / REAL_H200).read_text())["synthetic"]


def test_reader_asks_the_real_machine_only_what_it_answered(tmp_path: Path) -> None:
    """Every call the reader makes now was made, and answered, on the real machine.

    The replay answers a call it has no record of with NotSupported; a call the reader
    started making since the recording would read as an absent feature and pass unseen.
    """
    recorded = _calls(REAL_H200)
    out = tmp_path / "again.json"

    record(ReplayNvml(recorded), out)
    again = json.loads(out.read_text())["calls"]

    unanswered = {
        (call, key)
        for call, answers in again.items()
        for key in answers
        if key not in recorded.get(call, {})
    }
    assert set() == unanswered


@pytest.mark.parametrize(
    ("recording", "topo"),
    [
        pytest.param(
            "h100-8gpu-nvswitch.json",
            "h100-sxm-8gpu-nvswitch_stas00_ht.txt",
            id="h100-nvswitch-fully-connected",
        ),
        pytest.param(
            "dgx1-v100-8gpu-cube-mesh.json",
            "v100-sxm2-8gpu-hybrid-cube-mesh_dlperf.txt",
            id="dgx1-cube-mesh",
        ),
    ],
)
def test_links_match_nvidia_smi_of_the_same_machine(recording: str, topo: str) -> None:
    """Synthetic recording. Links equal the topo -m NV# cells."""
    reading = read_nvml(ReplayNvml.load(NVML / recording))
    spec = read_nvidia_smi_topo(FIXTURES / "topo" / topo)

    assert [(x.a, x.b, x.links, x.bandwidth_g_bps) for x in spec.gpu_links] == [
        (x.a, x.b, x.links, x.bandwidth_g_bps) for x in reading.gpu_links
    ]
    assert [] == reading.notices


def test_nvswitch_links_lead_to_switches_not_gpus() -> None:
    """Synthetic recording. No H100 link ends at a GPU."""
    calls = _calls("h100-8gpu-nvswitch.json")
    gpu_buses = {v["busId"] for v in calls["nvmlDeviceGetPciInfo"].values()}
    remote_buses = {v["busId"] for v in calls["nvmlDeviceGetNvLinkRemotePciInfo"].values()}

    reading = read_nvml(ReplayNvml(calls))

    assert set() == gpu_buses & remote_buses
    assert 28 == len(reading.gpu_links)
    assert {(18, 450.0)} == {(x.links, x.bandwidth_g_bps) for x in reading.gpu_links}


def test_switch_links_pair_by_the_narrower_gpu() -> None:
    """Synthetic recording. 12 of 18 links up: pairs at 12."""
    calls = copy.deepcopy(_calls("h100-8gpu-nvswitch.json"))
    for link in range(12, 18):
        calls["nvmlDeviceGetNvLinkState"][f"3,{link}"] = 0

    links = _links(read_nvml(ReplayNvml(calls)))

    assert 12 == links[(3, 5)]
    assert 18 == links[(4, 5)]


def test_gpu_fields() -> None:
    """Synthetic recording."""
    reading = read_nvml(ReplayNvml.load(NVML / "h100-8gpu-nvswitch.json"))
    gpu = reading.gpus[0]

    assert (0, "0000:18:00.0", "NVIDIA H100 80GB HBM3", 85520809984, None, False) == (
        gpu.index,
        gpu.pci_bus_id,
        gpu.model,
        gpu.memory_bytes,
        gpu.numa,
        gpu.mig_mode,
    )
    assert gpu.uuid.startswith("GPU-")


def test_grace_numa_and_mig_enabled() -> None:
    """Synthetic recording. NUMA when NVML knows it; MIG mode on."""
    calls = copy.deepcopy(_calls("pcie-4gpu-l40s.json"))
    calls["nvmlDeviceGetNumaNodeId"]["1"] = 1
    calls["nvmlDeviceGetMigMode"]["2"] = [1, 1]

    reading = read_nvml(ReplayNvml(calls))

    assert [None, 1, None, None] == [g.numa for g in reading.gpus]
    assert [None, None, True, None] == [g.mig_mode for g in reading.gpus]


def test_pcie_only_box() -> None:
    """Synthetic recording. No NVLink: PCIe paths only."""
    reading = read_nvml(ReplayNvml.load(NVML / "pcie-4gpu-l40s.json"))

    assert [] == reading.gpu_links
    assert {(0, 1): PathType.PXB, (2, 3): PathType.PXB, (0, 2): PathType.SYS} == {
        (p.a, p.b): p.path for p in reading.gpu_paths if (p.a, p.b) in ((0, 1), (2, 3), (0, 2))
    }
    assert 4 == len(reading.gpus)


def test_one_failing_gpu_is_listed_with_a_notice() -> None:
    """Synthetic recording. GPU 5 fell off the bus mid-read."""
    calls = copy.deepcopy(_calls("h100-8gpu-nvswitch.json"))
    lost = {"nvmlError": "GpuIsLost"}
    for call in ("nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetMemoryInfo"):
        calls[call]["5"] = lost
    for link in range(18):
        calls["nvmlDeviceGetNvLinkState"][f"5,{link}"] = lost

    reading = read_nvml(ReplayNvml(calls))

    assert 8 == len(reading.gpus)
    assert ("", "", "NVIDIA H100 80GB HBM3") == (
        reading.gpus[5].uuid,
        reading.gpus[5].pci_bus_id,
        reading.gpus[5].model,
    )
    assert 21 == len(reading.gpu_links)
    assert "GPU 5: nvmlDeviceGetUUID: GPU is lost" == reading.notices[0]


def test_handle_failure_keeps_the_index() -> None:
    """Synthetic recording."""
    calls = copy.deepcopy(_calls("pcie-4gpu-l40s.json"))
    calls["nvmlDeviceGetHandleByIndex"]["2"] = {"nvmlError": "NoPermission"}

    reading = read_nvml(ReplayNvml(calls))

    assert [0, 1, 2, 3] == [g.index for g in reading.gpus]
    assert "" == reading.gpus[2].pci_bus_id
    assert ["GPU 2: nvmlDeviceGetHandleByIndex: Insufficient Permissions"] == reading.notices


@pytest.mark.parametrize(
    ("error", "message"),
    [
        pytest.param("LibraryNotFound", NO_DRIVER, id="no-libnvidia-ml"),
        pytest.param("DriverNotLoaded", NO_DRIVER, id="driver-not-loaded"),
        pytest.param(
            "NoPermission", "NVML did not start (Insufficient Permissions)", id="no-permission"
        ),
    ],
)
def test_no_driver_is_a_clear_notice(error: str, message: str) -> None:
    """Synthetic recording."""
    calls = {"nvmlInit": {"": {"nvmlError": error}}}

    with pytest.raises(SourceUnavailableError) as caught:
        read_nvml(ReplayNvml(calls))

    assert str(caught.value).startswith(message)
    assert 1 == len(str(caught.value).splitlines())


def test_real_pynvml_without_driver_on_this_machine() -> None:
    """The build machines have no NVIDIA driver: the real module must say so in one line."""
    with pytest.raises(SourceUnavailableError, match="no NVIDIA driver"):
        read_nvml()


def test_recorder_captures_exactly_what_the_reader_needs(tmp_path: Path) -> None:
    """Synthetic recording. A recorded replay replays the same."""
    source = ReplayNvml.load(NVML / "dgx1-v100-8gpu-cube-mesh.json")
    out = tmp_path / "recorded.json"

    first = record(source, out, about="re-recorded replay")
    second = read_nvml(ReplayNvml.load(out))

    assert first == second
    assert first == read_nvml(ReplayNvml.load(NVML / "dgx1-v100-8gpu-cube-mesh.json"))


def test_checked_in_recordings_match_their_generator(tmp_path: Path) -> None:
    """The synthetic recordings are exactly what synthesize.py writes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("synthesize", NVML / "synthesize.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    for name, build in (
        ("h100-8gpu-nvswitch", module.h100_nvswitch),
        ("dgx1-v100-8gpu-cube-mesh", module.dgx1_v100),
        ("pcie-4gpu-l40s", module.pcie_4gpu),
    ):
        assert json.loads((NVML / f"{name}.json").read_text()) == build()
