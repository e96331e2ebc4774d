"""Folding NVML and kubelet readings into a sysfs spec (pure).

The NVML side replays recorded data; not yet proven on a real GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from numatopo_engine.cpuset import CPUSet
from numatopo_engine.model import Gpu, GpuPath, Nic, NumaNode, NumatopologySpec, PathType, PciPath
from numatopo_exporter.discovery.discover import merge_gpu_reading, merge_kubelet
from numatopo_exporter.discovery.hostroot import HostRoot
from numatopo_exporter.discovery.kubelet import read_kubelet
from numatopo_exporter.discovery.nvml import GpuReading, read_nvml
from numatopo_exporter.discovery.pci import normalize_bus_id
from nvml_replay import ReplayNvml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
H100_BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]


def _sysfs_like_h100() -> NumatopologySpec:
    """What sysfs shows of the H100 box, GPUs numbered in reverse to prove the renumbering."""
    gpus = [
        Gpu(index=7 - i, pci_bus_id=f"0000:{bus}:00.0", numa=0 if i < 4 else 1, model="10de:2330")
        for i, bus in enumerate(H100_BUSES)
    ]
    return NumatopologySpec(
        numa_nodes=[
            NumaNode(id=0, cpus=CPUSet.parse("0-51,104-155")),
            NumaNode(id=1, cpus=CPUSet.parse("52-103,156-207")),
        ],
        gpus=gpus,
        gpu_paths=[GpuPath(a=6, b=7, path=PathType.NODE)],
        nics=[Nic(name="mlx5_0", pci_bus_id="0000:1a:00.0", numa=0)],
        pci_paths=[
            PciPath(gpu=7, nic="mlx5_0", path=PathType.PIX),
            PciPath(gpu=0, nic="mlx5_0", path=PathType.SYS),
        ],
        sources=["sysfs"],
    )


def _h100_reading() -> GpuReading:
    return read_nvml(ReplayNvml.load(FIXTURES / "nvml" / "h100-8gpu-nvswitch.json"))


def test_nvml_indices_and_sysfs_numa() -> None:
    """Replays recorded data; not yet proven on a real GPU."""
    merged = merge_gpu_reading(_sysfs_like_h100(), _h100_reading())

    assert [0, 1, 2, 3, 4, 5, 6, 7] == [g.index for g in merged.gpus]
    assert [f"0000:{b}:00.0" for b in H100_BUSES] == [g.pci_bus_id for g in merged.gpus]
    assert [0, 0, 0, 0, 1, 1, 1, 1] == [g.numa for g in merged.gpus]
    assert {"NVIDIA H100 80GB HBM3"} == {g.model for g in merged.gpus}


def test_paths_follow_the_renumbering_and_links_come_from_nvml() -> None:
    """Replays recorded data; not yet proven on a real GPU."""
    merged = merge_gpu_reading(_sysfs_like_h100(), _h100_reading())

    assert [(0, PathType.PIX), (7, PathType.SYS)] == [(p.gpu, p.path) for p in merged.pci_paths]
    assert 28 == len(merged.gpu_links)
    assert PathType.NODE == next(p.path for p in merged.gpu_paths if (p.a, p.b) == (0, 1))
    assert ["sysfs", "nvml"] == merged.sources


def test_nvml_numa_wins_when_it_has_one() -> None:
    """Replays recorded data; not yet proven on a real GPU."""
    reading = _h100_reading()
    grace = GpuReading(gpus=[g.model_copy(update={"numa": 1}) for g in reading.gpus])

    merged = merge_gpu_reading(_sysfs_like_h100(), grace)

    assert {1} == {g.numa for g in merged.gpus}


def test_gpu_nvml_does_not_list_is_kept_after_nvml_indices() -> None:
    """Replays recorded data; not yet proven on a real GPU."""
    base = _sysfs_like_h100()
    extra = Gpu(index=8, pci_bus_id="0000:c1:00.0", numa=1, vendor="amd", resource="amd.com/gpu")
    base = NumatopologySpec.model_validate(
        base.model_copy(update={"gpus": [*base.gpus, extra]}).model_dump()
    )

    merged = merge_gpu_reading(base, _h100_reading())

    assert ("0000:c1:00.0", "amd") == (merged.gpus[8].pci_bus_id, merged.gpus[8].vendor)
    assert 9 == merged.capacity.gpus


def test_merge_kubelet_sets_policies_and_reserved() -> None:
    reading = read_kubelet(HostRoot(FIXTURES / "kubelet" / "static-single-numa"))

    merged = merge_kubelet(_sysfs_like_h100(), reading)

    assert ("static", "single-numa-node", "0,104") == (
        merged.policies.cpu_manager_policy,
        merged.policies.topology_manager_policy,
        str(merged.reserved_cpus),
    )
    assert ["sysfs", "kubelet"] == merged.sources


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("00000000:18:00.0", "0000:18:00.0", id="nvml-8-digit-domain"),
        pytest.param("0000:1A:00.0", "0000:1a:00.0", id="upper-case"),
        pytest.param("18:00.0", "0000:18:00.0", id="no-domain"),
        pytest.param("0002:01:00.1", "0002:01:00.1", id="power-domain"),
    ],
)
def test_bus_id_forms(raw: str, expected: str) -> None:
    assert expected == normalize_bus_id(raw)


@pytest.mark.parametrize("raw", ["", "GPU-1234", "0000:18:00.9", "100000000:18:00.0"])
def test_not_a_bus_id(raw: str) -> None:
    with pytest.raises(ValueError, match="PCI"):
        normalize_bus_id(raw)
